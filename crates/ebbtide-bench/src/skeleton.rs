//! A floor for ebbtide's design: the rseq pop/push critical sections of `ebbtide::pcpu`
//! (copied instruction for instruction) on a private per-CPU stack, with nothing around them:
//! no ownership check of the freed pointer, no `careful` flag, no `Result`. Timing it beside
//! `Zone::alloc`/`Zone::free` in the same rounds shows what the code around the critical sections
//! costs. It is not an allocator (a fixed pool of items) and appears only in the notes.

use crate::peers::Alloc;

pub struct Skeleton {
    base: *mut u8,
    ncpu: u32,
    off: isize,
}

// SAFETY: each CPU's stack is touched only inside rseq critical sections on that CPU.
unsafe impl Sync for Skeleton {}

/// As `ebbtide::pcpu`: one 4 KiB page per CPU, 64-byte header, 504 slots.
const SHIFT: u32 = 12;
const STRIDE: usize = 1 << SHIFT;
const SLOTS: usize = (STRIDE - 64) / 8;
const PREFILL: usize = 252;

impl Skeleton {
    /// None when glibc has not registered rseq.
    pub fn new(ncpu: usize) -> Option<Skeleton> {
        // SAFETY: dlsym with NUL-terminated names; glibc's declarations are
        // `const ptrdiff_t __rseq_offset` and `const unsigned int __rseq_size`.
        let off = unsafe {
            let o = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
            let s = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
            if o.is_null() || s.is_null() || *(s as *const u32) < 20 {
                return None;
            }
            *(o as *const isize)
        };
        let mem: &'static mut [u64] = Vec::leak(vec![0u64; STRIDE / 8 * ncpu]);
        let items: &'static mut [[u8; 64]] = Vec::leak(vec![[0u8; 64]; PREFILL * ncpu]);
        for cpu in 0..ncpu {
            let h = &mut mem[cpu * STRIDE / 8..(cpu + 1) * STRIDE / 8];
            h[0] = PREFILL as u64; // count
            h[1] = SLOTS as u64; // cap = SLOTS, floor = 0
            for i in 0..PREFILL {
                h[8 + i] = items[cpu * PREFILL + i].as_mut_ptr() as u64;
            }
        }
        Some(Skeleton {
            base: mem.as_mut_ptr().cast(),
            ncpu: ncpu as u32,
            off,
        })
    }

    #[inline(always)]
    fn pop(&self) -> *mut u8 {
        let out: usize;
        // SAFETY: the critical section of ebbtide::pcpu::rseq::pop on our own headers.
        unsafe {
            core::arch::asm!(
                "2:",
                "leaq 9f(%rip), %rax",
                "movq %rax, %fs:8({off})",
                "3:",
                "movl %fs:4({off}), %eax",
                "cmpl {ncpu:e}, %eax",
                "jae 7f",
                "shlq ${shift}, %rax",
                "addq {base}, %rax",
                "movl 12(%rax), %r8d",
                "movq (%rax), %rcx",
                "movzwl %cx, %edx",
                "cmpl %r8d, %edx",
                "jbe 7f",
                "movq 56(%rax,%rdx,8), {out}",
                "addq $0xffff, %rcx",
                "movq %rcx, (%rax)",
                "4:",
                ".pushsection __rseq_failure, \"ax\"",
                ".long 0x53053053",
                "5:",
                "jmp 2b",
                "7:",
                "xorl {out:e}, {out:e}",
                "jmp 4b",
                ".popsection",
                ".pushsection __rseq_cs, \"aw\"",
                ".balign 32",
                "9:",
                ".long 0, 0",
                ".quad 3b, 4b - 3b, 5b",
                ".popsection",
                off = in(reg) self.off,
                ncpu = in(reg) self.ncpu,
                base = in(reg) self.base,
                shift = const SHIFT,
                out = out(reg) out,
                out("rax") _,
                out("rcx") _,
                out("rdx") _,
                out("r8") _,
                options(att_syntax, nostack),
            );
        }
        out as *mut u8
    }

    #[inline(always)]
    fn push(&self, item: *mut u8) -> bool {
        // SAFETY: the critical section of ebbtide::pcpu::rseq::push on our own headers.
        unsafe {
            core::arch::asm!(
                "2:",
                "leaq 9f(%rip), %rax",
                "movq %rax, %fs:8({off})",
                "3:",
                "movl %fs:4({off}), %eax",
                "cmpl {ncpu:e}, %eax",
                "jae 7f",
                "shlq ${shift}, %rax",
                "addq {base}, %rax",
                "movl 8(%rax), %r8d",
                "movq (%rax), %rcx",
                "movzwl %cx, %edx",
                "cmpl %r8d, %edx",
                "jae 7f",
                "movq {item}, 64(%rax,%rdx,8)",
                "addq $1, %rcx",
                "movq %rcx, (%rax)",
                "4:",
                ".pushsection __rseq_failure, \"ax\"",
                ".long 0x53053053",
                "5:",
                "jmp 2b",
                "7:",
                "jmp {full}",
                ".popsection",
                ".pushsection __rseq_cs, \"aw\"",
                ".balign 32",
                "9:",
                ".long 0, 0",
                ".quad 3b, 4b - 3b, 5b",
                ".popsection",
                off = in(reg) self.off,
                ncpu = in(reg) self.ncpu,
                base = in(reg) self.base,
                shift = const SHIFT,
                item = in(reg) item,
                out("rax") _,
                out("rcx") _,
                out("rdx") _,
                out("r8") _,
                full = label { return false; },
                options(att_syntax, nostack),
            );
        }
        true
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
        let p = self.pop();
        if p.is_null() {
            fail();
        }
        p
    }
    #[inline(always)]
    unsafe fn free(&self, p: *mut u8) {
        if !self.push(p) {
            fail();
        }
    }
}
