//! Gemma Gem UI components (Yew + stylist). Pure UI: props and callbacks only.

pub mod launcher;
pub use launcher::{Launcher, LauncherProps, LauncherStatus};
