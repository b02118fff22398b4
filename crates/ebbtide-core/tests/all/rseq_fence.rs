//! Does the kernel honour the fence the per-CPU drain relies on?
//!
//! `pcpu.rs` assumes that after `stop` stores + `membarrier(PRIVATE_EXPEDITED_RSEQ, FLAG_CPU, cpu)`
//! no rseq critical section on `cpu` can commit with the old header values. This test checks
//! exactly that with its own minimal critical section (same shape as `pcpu::rseq::push`: read the
//! CPU id, index a per-CPU slot, check a `stopped` word, commit with one store) and no allocator
//! code at all: worker threads increment their CPU's counter inside the section unless that CPU
//! is stopped; a drainer stops a CPU, fences it, and then checks the counter no longer moves.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

#[path = "../../../ebbtide/tests/support/skip.rs"]
mod skip;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_int = 1 << 7;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_int = 1 << 8;
const MEMBARRIER_CMD_FLAG_CPU: libc::c_uint = 1;

#[repr(C, align(64))]
struct Slot {
    count: AtomicU64,   // +0, the commit store
    stopped: AtomicU64, // +8
}

fn rseq_offset() -> Option<isize> {
    // SAFETY: dlsym with RTLD_DEFAULT and NUL-terminated names.
    let (off, size) = unsafe {
        (
            libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()),
            libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()),
        )
    };
    if off.is_null() || size.is_null() {
        return None;
    }
    // SAFETY: glibc's `const ptrdiff_t __rseq_offset` / `const unsigned int __rseq_size`.
    let (off, size) = unsafe { (*(off as *const isize), *(size as *const u32)) };
    (size >= 20).then_some(off)
}

/// One critical section: `slots[cpu].count += 1` unless `slots[cpu].stopped`; returns the CPU or
/// u32::MAX when stopped.
#[inline(never)]
fn bump(slots: *const Slot, ncpu: u32, off: isize, dst: *mut u64) -> u32 {
    let cpu: u32;
    // SAFETY: an rseq critical section over `slots[cpu]`, cpu < ncpu checked.
    unsafe {
        core::arch::asm!(
            "2:",
            "leaq 9f(%rip), %rax",
            "movq %rax, %fs:8({off})",
            "3:",
            "movl %fs:4({off}), %eax",
            "cmpl {ncpu:e}, %eax",
            "jae 7f",
            "movl %eax, {cpu:e}",
            "shlq $6, %rax",
            "addq {base}, %rax",
            "cmpq $0, 8(%rax)",
            "jne 7f",
            "movq (%rax), %rcx",
            "movq %rcx, ({dst})",
            "addq $1, %rcx",
            "movq %rcx, (%rax)",
            "4:",
            "jmp 8f",
            ".long 0x53053053",
            "5:",
            "jmp 2b",
            "7:",
            "movl $-1, {cpu:e}",
            "8:",
            ".pushsection __rseq_cs, \"aw\"",
            ".balign 32",
            "9:",
            ".long 0, 0",
            ".quad 3b, 4b - 3b, 5b",
            ".popsection",
            off = in(reg) off,
            ncpu = in(reg) ncpu,
            base = in(reg) slots,
            dst = in(reg) dst,
            cpu = out(reg) cpu,
            out("rax") _,
            out("rcx") _,
            options(att_syntax, nostack),
        );
    }
    cpu
}

fn run(fault_inside: bool) {
    let Some(off) = rseq_offset() else {
        skip::skip(
            &skip::current_test(),
            "glibc has no rseq area registered (glibc 2.35 or later registers one)",
        );
        return;
    };
    // SAFETY: membarrier registration has no memory-safety preconditions.
    let r = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ,
            0,
            0,
        )
    };
    if r != 0 {
        skip::skip(
            &skip::current_test(),
            "the kernel refused membarrier's RSEQ registration",
        );
        return;
    }
    let ncpu = ebbtide_core::os::cpu_count();
    let slots: Vec<Slot> = (0..ncpu)
        .map(|_| Slot {
            count: AtomicU64::new(0),
            stopped: AtomicU64::new(0),
        })
        .collect();
    let done = AtomicBool::new(false);
    let violations = AtomicU64::new(0);
    let fences = AtomicU64::new(0);
    let succeeded = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                // A private page the section writes to; with `fault_inside` it is given back
                // before every section, so the section takes a page fault before its commit.
                let page = ebbtide_core::os::map(4096).unwrap().as_ptr();
                let mut ok = 0u64;
                while !done.load(Ordering::Relaxed) {
                    for _ in 0..1000 {
                        if fault_inside {
                            // SAFETY: our own mapping.
                            unsafe { libc::madvise(page.cast(), 4096, libc::MADV_DONTNEED) };
                        }
                        if bump(slots.as_ptr(), ncpu as u32, off, page.cast()) != u32::MAX {
                            ok += 1;
                        }
                    }
                }
                succeeded.fetch_add(ok, Ordering::Relaxed);
            });
        }
        s.spawn(|| {
            let t0 = Instant::now();
            let mut cpu = 0;
            while t0.elapsed() < Duration::from_secs(2) {
                let sl = &slots[cpu];
                sl.stopped.store(1, Ordering::SeqCst);
                // SAFETY: membarrier has no memory-safety preconditions.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_membarrier,
                        MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ,
                        MEMBARRIER_CMD_FLAG_CPU,
                        cpu as libc::c_int,
                    )
                };
                assert_eq!(r, 0, "membarrier failed");
                let a = sl.count.load(Ordering::SeqCst);
                for _ in 0..2000 {
                    std::hint::spin_loop();
                }
                let b = sl.count.load(Ordering::SeqCst);
                if a != b {
                    violations.fetch_add(1, Ordering::Relaxed);
                }
                fences.fetch_add(1, Ordering::Relaxed);
                sl.stopped.store(0, Ordering::SeqCst);
                cpu = (cpu + 1) % ncpu;
            }
            done.store(true, Ordering::Relaxed);
        });
    });
    let total: u64 = slots.iter().map(|s| s.count.load(Ordering::Relaxed)).sum();
    let (v, f) = (
        violations.load(Ordering::Relaxed),
        fences.load(Ordering::Relaxed),
    );
    println!("rseq fence (fault inside: {fault_inside}): {f} fences, {total} sections committed, {v} commits after a fence");
    assert!(total > 0 && f > 0);
    // Sections on one CPU never interleave (preemption, migration and the fence abort them), so
    // the plain read-add-store increments lose nothing.
    assert_eq!(
        total,
        succeeded.load(Ordering::Relaxed),
        "committed sections lost updates: two sections interleaved on one CPU"
    );
    assert_eq!(
        v, 0,
        "{v} of {f} fences: a critical section committed on a stopped CPU after \
         membarrier(PRIVATE_EXPEDITED_RSEQ, FLAG_CPU) returned"
    );
}

#[test]
fn membarrier_flag_cpu_fences_rseq_sections() {
    let _turn = crate::serial::turn(module_path!());
    run(false);
}

/// The same with a page fault inside every critical section (the allocator's batch moves write
/// bucket memory that reclaim may have given back, so they can fault mid-section).
#[test]
fn membarrier_fences_sections_that_fault() {
    let _turn = crate::serial::turn(module_path!());
    run(true);
}
