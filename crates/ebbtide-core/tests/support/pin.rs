//! Pinning the test's thread to one CPU (the per-CPU stacks a test looks at are that CPU's).

#![allow(dead_code)] // each test binary uses some of these

/// Pins this thread to `cpu`.
pub fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET on an index below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
            0,
            "sched_setaffinity to CPU {cpu}"
        );
    }
}

/// Pins this thread to the last CPU and returns it.
pub fn pin_last_cpu() -> usize {
    let cpu = ebbtide_core::os::cpu_count() - 1;
    pin(cpu);
    cpu
}

/// Pins this thread to the CPU it runs on and returns it.
pub fn pin_here() -> usize {
    ebbtide_core::os::pin_to_current_cpu()
}
