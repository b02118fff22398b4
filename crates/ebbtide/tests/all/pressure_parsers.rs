//! Robustness of every pressure-file parser: random and mutated inputs never panic, and
//! valid inputs survive mutation of unrelated bytes. (A poor man's fuzz run: a fixed-seed
//! generator, so failures reproduce.)

use ebbtide::pressure::cgroup::{parse_mountinfo, parse_proc_cgroup, resolve};
use ebbtide::pressure::memory_events::parse_memory_events;
use ebbtide::pressure::systemd::base64_decode;
use ebbtide::pressure::{Level, PsiTrigger};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const SEEDS: &[&str] = &[
    "9:name=systemd:/\n4:memory:/process_api/f618\n0::/\n",
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
    "1 2 0:3 /a\\040b /m\\134x rw shared:1 - cgroup2 none rw\n",
    "c29tZSAyMDAwMDAgMjAwMDAwMAA=",
    "some 70000 2000000\0",
    "low 0\nhigh 3\nmax 1\noom 0\noom_kill 0\n",
    "critical",
];

fn mutate(rng: &mut Rng, s: &str) -> String {
    let mut b = s.as_bytes().to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(4) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            1 if !b.is_empty() => {
                let i = rng.below(b.len());
                b.remove(i);
            }
            2 => {
                let i = rng.below(b.len() + 1);
                const ALPHABET: &[u8] = b"\\:- 0=\n/\0max";
                let c = ALPHABET[rng.below(ALPHABET.len())];
                b.insert(i, c);
            }
            _ => {
                let n = rng.below(b.len() + 1);
                b.truncate(n);
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn all_parsers(s: &str) {
    let _ = parse_proc_cgroup(s);
    let _ = parse_mountinfo(s);
    let _ = resolve(s, s);
    let _ = base64_decode(s);
    let _ = s.parse::<PsiTrigger>();
    let _ = parse_memory_events(s);
    let _ = s.parse::<Level>();
}

#[test]
fn parsers_never_panic_on_mutated_inputs() {
    let _turn = crate::serial::turn(module_path!());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let seed = SEEDS[rng.below(SEEDS.len())];
        all_parsers(&mutate(&mut rng, seed));
    }
    // And on pure noise.
    for _ in 0..5_000 {
        let len = rng.below(64);
        let v: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        all_parsers(&String::from_utf8_lossy(&v));
    }
}

#[test]
fn valid_inputs_parse() {
    let _turn = crate::serial::turn(module_path!());
    assert_eq!(base64_decode(SEEDS[3]).unwrap(), b"some 200000 2000000\0");
    assert_eq!(
        SEEDS[4].parse::<PsiTrigger>().unwrap(),
        PsiTrigger::some(70_000, 2_000_000)
    );
    assert_eq!(parse_memory_events(SEEDS[5]).unwrap().high, 3);
    let m = parse_mountinfo(SEEDS[2]);
    assert_eq!(m[0].root, "/a b");
    assert_eq!(m[0].mount_point, std::path::PathBuf::from("/m\\x"));
    // Every PSI trigger the kernel accepts round-trips through text.
    let mut rng = Rng(42);
    for _ in 0..1000 {
        let window = 500_000 + rng.below(9_500_001) as u64;
        let stall = 1 + rng.below(window as usize) as u64;
        let t = if rng.below(2) == 0 {
            PsiTrigger::some(stall, window)
        } else {
            PsiTrigger::full(stall, window)
        };
        assert_eq!(t.to_string().parse::<PsiTrigger>(), Ok(t));
        assert_eq!(
            String::from_utf8(t.to_bytes())
                .unwrap()
                .parse::<PsiTrigger>(),
            Ok(t)
        );
    }
}
