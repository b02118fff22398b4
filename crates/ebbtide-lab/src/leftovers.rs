//! Leftovers of earlier runs: lab cgroups and swap files whose creating process died. Above
//! `cgroup` and `swap`, which know their own resources, and `cleanup`, which they register with.

/// Removes what an earlier, interrupted run left behind: lab cgroups (v1 and v2) and lab
/// swap files whose creating process is no longer alive. Resources of live processes —
/// this one included — are never touched. Prints each removal on stderr and returns the
/// list of what was removed.
pub fn cleanup_leftovers() -> crate::Result<Vec<String>> {
    let mut removed = crate::cgroup::cleanup_leftover_cgroups()?;
    removed.extend(crate::swap::cleanup_leftover_swapfiles()?);
    for r in &removed {
        eprintln!("ebbtide-lab: removed leftover {r}");
    }
    Ok(removed)
}
