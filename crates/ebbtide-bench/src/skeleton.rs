//! A floor for ebbtide's design: the rseq pop/push critical sections of `ebbtide::pcpu` (the
//! library's own, through `ebbtide::pcpu::BareStacks`) on private per-CPU stacks, with nothing
//! around them: no ownership check of the freed pointer, no `careful` test, no `Result`. Timing
//! it beside `Zone::alloc`/`Zone::free` in the same rounds shows what the code around the
//! critical sections costs. It is not an allocator (a fixed pool of items) and appears only in
//! the notes.

use crate::peers::Alloc;
use ebbtide::pcpu::BareStacks;

pub struct Skeleton(BareStacks);

/// Items per CPU stack at the start: 252 of the 1016 slots, so that neither a pop nor a push
/// misses in the benchmark's loops.
const PREFILL: usize = 252;

impl Skeleton {
    /// None when glibc has not registered rseq.
    pub fn new() -> Option<Skeleton> {
        let mut items = Vec::leak(vec![[0u8; 64]; PREFILL * ebbtide::os::cpu_count()]).iter_mut();
        BareStacks::new(PREFILL, || items.next().unwrap().as_mut_ptr()).map(Skeleton)
    }
}

#[cold]
#[inline(never)]
fn fail() -> ! {
    panic!("skeleton stack empty or full (pool exhausted)")
}

impl Alloc for Skeleton {
    #[inline(always)]
    fn alloc(&self) -> *mut u8 {
        let p = self.0.pop();
        if p.is_null() {
            fail();
        }
        p
    }
    #[inline(always)]
    unsafe fn free(&self, p: *mut u8) {
        if !self.0.push(p) {
            fail();
        }
    }
}
