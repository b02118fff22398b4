//! The layer order of the runtime crate, written in its crate docs (`src/lib.rs`), is the order
//! its code has: every module names only modules below it (same checker as ebbtide-core's).

#[path = "../../../ebbtide-core/tests/support/layers.rs"]
mod layers;

#[test]
fn modules_only_reach_down() {
    let _turn = crate::serial::turn(module_path!());
    layers::check(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
}
