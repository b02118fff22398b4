//! Whose code a thread runs: the library's own (its constructor, the runtime's start on a
//! program's thread, a runtime thread) or the program's. An allocation that the heap cannot
//! serve (an `RLIMIT_AS` reached) gets NULL and `ENOMEM` when the program asked, as under any
//! malloc; when the library's own code asked, Rust's allocation-error handler would abort the
//! program for the library's sake, so the malloc hands it a block of its bootstrap area
//! instead (`ebbtide-malloc`'s `heap.rs`, `library_block_or_enomem`).

thread_local! {
    /// How deep this thread is in the library's own code ([`LibraryCode`]); a runtime thread
    /// is in it for good. (No destructor: a `#[thread_local]` the malloc's failure path can
    /// read at any time.)
    static LIBRARY_CODE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The calling thread runs the library's own code while this lives (module docs).
pub struct LibraryCode(());

impl LibraryCode {
    /// Enters the library's own code (nests). Inlined: a program's first call into the
    /// library (the malloc's constructor) runs it, and out of line it was a function outside the
    /// malloc's hot text (`hot-text.txt`).
    #[inline]
    pub fn enter() -> LibraryCode {
        LIBRARY_CODE.with(|d| d.set(d.get() + 1));
        LibraryCode(())
    }
}

impl Drop for LibraryCode {
    #[inline]
    fn drop(&mut self) {
        LIBRARY_CODE.with(|d| d.set(d.get() - 1));
    }
}

/// A runtime thread: in the library's own code until it ends.
pub(crate) fn enter_for_good() {
    core::mem::forget(LibraryCode::enter());
}

/// Whether the calling thread is in the library's own code ([`LibraryCode`]).
pub fn in_library_code() -> bool {
    LIBRARY_CODE.with(|d| d.get() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_code_nests_and_ends() {
        assert!(!in_library_code());
        {
            let _a = LibraryCode::enter();
            {
                let _b = LibraryCode::enter();
                assert!(in_library_code());
            }
            assert!(in_library_code());
        }
        assert!(!in_library_code());
        std::thread::spawn(|| {
            enter_for_good();
            assert!(in_library_code());
        })
        .join()
        .unwrap();
        assert!(!in_library_code(), "another thread's");
    }
}
