//! `ebbtide completions SHELL` and `ebbtide manpages DIR`: shell completions and man pages made
//! from the command's own definition (clap), so they cannot drift from what the command
//! accepts. The Debian package ships both (`scripts/package-deb.sh`).

use crate::error::CliError;
use clap::CommandFactory;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args, Debug)]
pub struct ManpagesArgs {
    /// Directory to write `ebbtide.1` and one `ebbtide-COMMAND.1` per subcommand into
    /// (created if missing).
    pub dir: PathBuf,
}

/// Completions for `a.shell` on standard output.
pub fn completions<C: CommandFactory>(a: CompletionsArgs) -> Result<(), CliError> {
    let mut cmd = C::command();
    clap_complete::generate(a.shell, &mut cmd, "ebbtide", &mut std::io::stdout());
    Ok(())
}

/// `ebbtide.1` and `ebbtide-<sub>.1` for every visible subcommand, in `a.dir`.
pub fn manpages<C: CommandFactory>(a: ManpagesArgs) -> Result<(), CliError> {
    let io = |what: String| move |err| CliError::Io { what, err };
    std::fs::create_dir_all(&a.dir).map_err(io(format!("cannot create {}", a.dir.display())))?;
    let cmd = C::command();
    let mut written = Vec::new();
    let mut page = |c: clap::Command, file: String| -> Result<(), CliError> {
        let path = a.dir.join(&file);
        let mut out = Vec::new();
        clap_mangen::Man::new(c)
            .render(&mut out)
            .map_err(io(format!("cannot render {file}")))?;
        std::fs::write(&path, out).map_err(io(format!("cannot write {}", path.display())))?;
        written.push(path);
        Ok(())
    };
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("ebbtide-{}", sub.get_name());
        // The page's title and synopsis name the full command (`ebbtide-stat`); clap keeps
        // command names for the program's life, so the one leaked string per page is by design.
        let title: &'static str = Box::leak(name.clone().into_boxed_str());
        page(sub.clone().name(title), format!("{name}.1"))?;
    }
    page(cmd, "ebbtide.1".into())?;
    for p in written {
        println!("{}", p.display());
    }
    Ok(())
}
