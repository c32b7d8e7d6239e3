//! What the two command-line tools share.

/// `eprintln!` that never panics: a progress line or message to standard error, dropped when
/// nothing reads it (`gemma-gem bench 2>&1 | head -c 0`), where `eprintln!` would panic.
#[macro_export]
macro_rules! note {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// Whether `e` comes from writing to a reader that went away (`gemma-gem bench | head`): the
/// tools then stop quietly with success, as a Unix filter does, instead of reporting an error.
pub fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::broken_pipe;
    use std::io::{Error, ErrorKind};

    #[test]
    fn only_a_broken_pipe_is_quiet() {
        let pipe = anyhow::Error::from(Error::from(ErrorKind::BrokenPipe));
        assert!(broken_pipe(&pipe));
        assert!(broken_pipe(&pipe.context("writing the results")));
        assert!(!broken_pipe(&anyhow::Error::from(Error::from(
            ErrorKind::PermissionDenied
        ))));
        assert!(!broken_pipe(&anyhow::anyhow!("broken pipe")));
    }
}
