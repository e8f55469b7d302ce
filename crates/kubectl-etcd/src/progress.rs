//! Progress while a command waits: a bar on a terminal, plain lines (one
//! per change) otherwise, e.g. in CI logs.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Progress towards `total` steps, with a message.
pub struct Progress {
    bar: Option<ProgressBar>,
    last: Option<(u64, String)>,
}

impl Progress {
    pub fn new(total: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            if let Ok(style) =
                ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            bar
        });
        Self { bar, last: None }
    }

    /// Shows `position` of the total and what happens.
    pub fn update(&mut self, position: u64, message: &str) {
        let now = (position, message.to_string());
        if self.last.as_ref() == Some(&now) {
            return;
        }
        match &self.bar {
            Some(bar) => {
                bar.set_position(position);
                bar.set_message(message.to_string());
            }
            None => eprintln!("{message}"),
        }
        self.last = Some(now);
    }

    /// Ends the bar, leaving `message` on screen.
    pub fn finish(self, message: &str) {
        match self.bar {
            Some(bar) => bar.finish_with_message(message.to_string()),
            None => eprintln!("{message}"),
        }
    }
}
