//! ebbtide as the process's malloc (work in progress: see issue 12).
