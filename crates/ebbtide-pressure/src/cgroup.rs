//! Discovery of the process's own cgroup directories, v1 memory and v2, from
//! `/proc/self/cgroup` and `/proc/self/mountinfo`.
//!
//! * v2: the `0::<path>` line of `/proc/self/cgroup`, joined to the mount point of the
//!   `cgroup2` file system.
//! * v1 memory: the `<id>:memory:<path>` line (the controller list may hold several
//!   controllers, e.g. `memory,cpu`), joined to the mount point of the `cgroup` file system
//!   whose super options include `memory`.
//!
//! When a mount's root is not `/` (a container sees only a subtree), the cgroup path is
//! taken relative to that root.

use std::path::{Path, PathBuf};

use super::fs::read_string;
use super::SourceError;

/// Own cgroup paths as listed in `/proc/self/cgroup` (relative to the hierarchy root).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcCgroup {
    /// The path of the `0::` line (cgroup v2).
    pub v2: Option<String>,
    /// The path of the v1 line whose controllers include `memory`.
    pub v1_memory: Option<String>,
}

/// Parse the content of `/proc/<pid>/cgroup`.
pub fn parse_proc_cgroup(text: &str) -> ProcCgroup {
    let mut out = ProcCgroup::default();
    for line in text.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if id == "0" && ctrls.is_empty() {
            out.v2 = Some(path.to_string());
        } else if ctrls.split(',').any(|c| c == "memory") {
            out.v1_memory = Some(path.to_string());
        }
    }
    out
}

/// One line of `/proc/<pid>/mountinfo` (the fields ebbtide needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Field 4: the root of the mount within its file system.
    pub root: String,
    /// Field 5: the mount point.
    pub mount_point: PathBuf,
    /// The file system type after the ` - ` separator.
    pub fstype: String,
    /// The super block options (last field).
    pub super_options: String,
}

/// Undo mountinfo's octal escapes (`\040` for space, `\011`, `\012`, `\134`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if v <= 255 {
                out.push(v as u8);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse `/proc/<pid>/mountinfo`; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if pre.len() < 5 || post.len() < 3 {
            continue;
        }
        out.push(Mount {
            root: unescape(pre[3]),
            mount_point: PathBuf::from(unescape(pre[4])),
            fstype: post[0].to_string(),
            super_options: post[2].to_string(),
        });
    }
    out
}

/// Join a cgroup path from `/proc/self/cgroup` to a mount, honouring a non-`/` mount root.
/// `None` if the cgroup lies outside the mounted subtree.
fn join_mount(m: &Mount, cg: &str) -> Option<PathBuf> {
    let rel = if m.root == "/" {
        cg.trim_start_matches('/')
    } else if cg == m.root {
        ""
    } else {
        cg.strip_prefix(m.root.as_str())?.strip_prefix('/')?
    };
    let rel = rel.trim_start_matches('/');
    Some(if rel.is_empty() {
        m.mount_point.clone()
    } else {
        m.mount_point.join(rel)
    })
}

/// The process's own cgroup directories.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupPaths {
    /// Own cgroup v2 directory, if a cgroup2 file system is mounted.
    pub v2: Option<PathBuf>,
    /// Own cgroup v1 memory directory, if the memory controller is mounted on v1.
    pub v1_memory: Option<PathBuf>,
}

/// Resolve own cgroup directories from the two files' contents.
pub fn resolve(proc_cgroup: &str, mountinfo: &str) -> CgroupPaths {
    let cg = parse_proc_cgroup(proc_cgroup);
    let mounts = parse_mountinfo(mountinfo);
    let v2 = cg.v2.as_deref().and_then(|p| {
        mounts
            .iter()
            .filter(|m| m.fstype == "cgroup2")
            .find_map(|m| join_mount(m, p))
    });
    let v1_memory = cg.v1_memory.as_deref().and_then(|p| {
        mounts
            .iter()
            .filter(|m| m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == "memory"))
            .find_map(|m| join_mount(m, p))
    });
    CgroupPaths { v2, v1_memory }
}

/// Resolve the calling process's own cgroup directories from `/proc/self/cgroup` and
/// `/proc/self/mountinfo`.
pub fn own() -> Result<CgroupPaths, SourceError> {
    let cg = read_string(Path::new("/proc/self/cgroup"))?;
    let mi = read_string(Path::new("/proc/self/mountinfo"))?;
    Ok(resolve(&cg, &mi))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CG: &str =
        "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/f618c018\n3:cpuset:/\n0::/\n";
    const MI: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn proc_cgroup() {
        let p = parse_proc_cgroup(CG);
        assert_eq!(p.v2.as_deref(), Some("/"));
        assert_eq!(p.v1_memory.as_deref(), Some("/process_api/f618c018"));
        let p = parse_proc_cgroup("5:cpu,memory:/a/b\ngarbage\n");
        assert_eq!(p.v1_memory.as_deref(), Some("/a/b"));
        assert_eq!(p.v2, None);
        // A path may contain ':'.
        let p = parse_proc_cgroup("0::/x:y\n");
        assert_eq!(p.v2.as_deref(), Some("/x:y"));
        // name=systemd is not the memory controller.
        assert_eq!(parse_proc_cgroup("1:name=memory:/z\n").v1_memory, None);
    }

    #[test]
    fn mountinfo() {
        let m = parse_mountinfo(MI);
        assert_eq!(m.len(), 4);
        assert_eq!(m[2].fstype, "cgroup");
        assert_eq!(m[2].super_options, "rw,memory");
        assert_eq!(m[3].mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
        // Optional fields before the separator, escapes in the mount point.
        let m = parse_mountinfo(
            "1 2 0:3 / /a\\040b rw shared:1 master:2 - cgroup2 none rw,nsdelegate\nbad line\n",
        );
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].mount_point, PathBuf::from("/a b"));
        assert_eq!(m[0].fstype, "cgroup2");
    }

    #[test]
    fn resolve_this_machine_layout() {
        let r = resolve(CG, MI);
        assert_eq!(r.v2, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(
            r.v1_memory,
            Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/f618c018"))
        );
    }

    #[test]
    fn resolve_pure_v2_and_container_root() {
        let r = resolve(
            "0::/system.slice/app.service\n",
            "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
        );
        assert_eq!(
            r.v2,
            Some(PathBuf::from("/sys/fs/cgroup/system.slice/app.service"))
        );
        assert_eq!(r.v1_memory, None);
        // Mount root is a subtree (container): the cgroup path is taken relative to it.
        let r = resolve(
            "4:memory:/docker/abc/sub\n0::/docker/abc\n",
            "1 0 0:1 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
             2 0 0:2 /docker/abc /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
        );
        assert_eq!(
            r.v1_memory,
            Some(PathBuf::from("/sys/fs/cgroup/memory/sub"))
        );
        assert_eq!(r.v2, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        // Outside the mounted subtree: not resolvable.
        let r = resolve(
            "0::/other\n",
            "2 0 0:2 /docker/abc /c rw - cgroup2 cgroup2 rw\n",
        );
        assert_eq!(r.v2, None);
    }

    #[test]
    fn own_resolves_on_this_machine() {
        // Only checks that the real files parse; which hierarchies exist depends on the host.
        let own = own().expect("reading /proc/self/cgroup and mountinfo");
        if let Some(p) = &own.v2 {
            assert!(p.is_dir(), "{} should be a directory", p.display());
        }
        if let Some(p) = &own.v1_memory {
            assert!(p.join("memory.usage_in_bytes").exists(), "{}", p.display());
        }
    }
}
