//! The layer order written in the design doc (`src/lib.rs`, the line starting "Layer order")
//! is the order the code has: every module of this crate names only modules below it (its
//! `crate::…` paths outside comments and test modules). A module that reaches up fails here,
//! with the offending line.

#[path = "../support/layers.rs"]
mod layers;

#[test]
fn modules_only_reach_down() {
    let _turn = crate::serial::turn(module_path!());
    layers::check(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
}

#[test]
fn the_checker_reads_past_test_items() {
    let _turn = crate::serial::turn(module_path!());
    let src = "use crate::a;\n\
               #[cfg(test)]\n\
               mod tests {\n\
                   fn f() { let s = \"}\"; let c = '{'; }\n\
                   use crate::b;\n\
               }\n\
               use crate::c;\n\
               #[cfg(test)]\n\
               #[allow(dead_code)]\n\
               fn g() {\n\
                   crate::d();\n\
               }\n\
               #[cfg(test)]\n\
               mod more;\n\
               fn h() { crate::e(); }\n";
    let code: Vec<String> = layers::code_lines(src)
        .into_iter()
        .map(|(_, l)| l.trim().to_string())
        .collect();
    assert_eq!(
        code,
        ["use crate::a;", "use crate::c;", "fn h() { crate::e(); }"]
    );
}
