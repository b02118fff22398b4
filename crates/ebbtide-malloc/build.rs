//! Lays out `libebbtide_malloc.so`'s hot functions together (the list: `hot-text.txt`).
//!
//! A program that preloads the library runs a few hundred of its ~3 000 functions, but rustc
//! and the linker scatter them over the whole text (700 kB), and the kernel maps every cached
//! file page within 64 KiB of a page a program touches (fault-around): all of the text became
//! resident in every process. rustc puts each function in its own section
//! (`.text.<symbol>`), so a linker script can gather them: this one adds an output section
//! `.text.hot` before `.text` (`INSERT BEFORE`, which keeps the linker's default script) that
//! takes the sections of the listed functions in the list's order. GNU ld and LLD read it.
//! Only the cdylib is linked with it: the rlib that `#[global_allocator]` users link is laid
//! out by their own link. `EBBTIDE_HOT_TEXT=off` at build time links without it (for a linker
//! that cannot read the script).
//!
//! It is also linked with packed relative relocations where the loader reads them
//! (`ebbtide_build::relr_link`), and with GCC's static unwinder instead of `libgcc_s.so.1`
//! (`ebbtide_build::unwind_link`).

use ebbtide_build::{hot_text_link, relr_link, unwind_link};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    relr_link::link();
    unwind_link::link();
    println!("cargo:rerun-if-changed=hot-text.txt");
    if !hot_text_link::wanted() {
        return;
    }
    let list = std::fs::read_to_string("hot-text.txt").expect("read hot-text.txt");
    let (entries, rest) = sections(&list);
    // The names are checked where the list is measured and the library ships: the profiles
    // that inherit `release` (thin LTO, one codegen unit). Profiles that inline differently
    // (`test`: opt-level 2, no LTO; `dev`) lack some of its functions and keep others, so a
    // name matching nothing there says nothing about the list.
    println!("cargo:rerun-if-env-changed=PROFILE");
    let mut asserts = String::new();
    if std::env::var("PROFILE").as_deref() == Ok("release") {
        asserts.push_str(&entries.asserts);
        asserts.push_str(&rest.asserts);
    }
    hot_text_link::link(
        "crates/ebbtide-malloc/build.rs from hot-text.txt",
        "hot-text.ld",
        &entries.body,
        &rest.body,
        &asserts,
    );
}

/// The input sections for the names of `hot-text.txt` (one mangled name per line, without its
/// hash; `#` starts a comment line): each name becomes the section patterns `.text.NAME*` and
/// `.text.unlikely.NAME*`, in the list's order, as two bodies. The list starts with the C and
/// C++ entry points (the names before the first one mangled by Rust; compiler helpers such as
/// `__udivti3` further down are not entry points): they go into `.text.hot`, each at the start
/// of a cache line. The second body, `.text.warm`, starts with the pieces every program runs
/// that are not Rust functions — glibc's `libc_nonshared.a` (`atexit`, `pthread_atfork`; its
/// members are not split into sections: matched by archive), the C runtime's `crtbeginS.o`
/// (`frame_dummy` at load, `__do_global_dtors_aux` at exit), the PLT (every call into the C
/// library) and the rseq abort handlers — and goes on with the Rust functions. (The PLT at the
/// end of the hot functions and `crtbeginS.o` at the start of `.text`, where the linker puts
/// it, kept the last 64 KiB window resident in every program.)
///
/// Every name's patterns are checked ([`hot_text_link::Checked`]): a name that matches no
/// function of a release build stops the link with `hot-text.txt: NAME matches no function`.
fn sections(list: &str) -> (hot_text_link::Checked, hot_text_link::Checked) {
    let (mut entries, mut rest) = (
        hot_text_link::Checked::default(),
        hot_text_link::Checked::default(),
    );
    for name in list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        assert!(
            !name.contains(char::is_whitespace) && !name.contains(['(', ')', '{', '}', ';']),
            "hot-text.txt: {name:?} is not a symbol name"
        );
        let rust = name.starts_with("_ZN") || name.starts_with("_R");
        let body = if rest.body.is_empty() && !rust {
            &mut entries
        } else {
            if rest.body.is_empty() {
                rest.body.push_str(concat!(
                    "    *libc_nonshared.a:*(.text .text.*)\n",
                    "    *crtbeginS.o(.text .text.*)\n",
                    "    *(.plt) *(.iplt)\n",
                    "    *(__rseq_failure)\n",
                ));
            }
            &mut rest
        };
        body.push(
            &format!("*(.text.{name}* .text.unlikely.{name}*)"),
            &format!(
                "hot-text.txt: {name} matches no function (remove or rename it; \
                 EBBTIDE_HOT_TEXT=off links without the list)"
            ),
        );
    }
    assert!(
        !entries.body.is_empty() && !rest.body.is_empty(),
        "hot-text.txt: the entry points first, then the Rust functions"
    );
    (entries, rest)
}
