//! A cancellation token: cheap to clone, cancelled once, awaitable.
//!
//! The agent loop checks it between stream chunks and also races every wait (model, tool,
//! approval) against it, so a cancelled run ends promptly even while the model is still busy.
//!
//! ```
//! use gg_agent::CancellationToken;
//!
//! let token = CancellationToken::new();
//! let seen_by_loop = token.clone();
//! assert!(!seen_by_loop.is_cancelled());
//! token.cancel();
//! assert!(seen_by_loop.is_cancelled());
//! futures::executor::block_on(seen_by_loop.cancelled()); // ready at once
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::agent::StopReason;

#[derive(Debug, Default)]
struct Inner {
    cancelled: AtomicBool,
    /// Why, when the canceller said (see [`CancellationToken::cancel_because`]).
    reason: Mutex<Option<StopReason>>,
    wakers: Mutex<Vec<Waker>>,
}

/// Tells a running agent loop to stop. Clones share the same state.
#[derive(Debug, Clone, Default)]
pub struct CancellationToken {
    inner: Arc<Inner>,
}

impl CancellationToken {
    /// A fresh, not cancelled token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels, waking everything awaiting [`CancellationToken::cancelled`].
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        let wakers = std::mem::take(
            &mut *self
                .inner
                .wakers
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for waker in wakers {
            waker.wake();
        }
    }

    /// Cancels for a stated reason: the run then ends with [`AgentEvent::Done`] carrying
    /// `reason` instead of [`StopReason::Cancelled`] (for instance
    /// [`StopReason::PageChanged`] when the tab navigated away mid-turn). The first reason
    /// given wins.
    ///
    /// [`AgentEvent::Done`]: crate::AgentEvent::Done
    pub fn cancel_because(&self, reason: StopReason) {
        {
            let mut slot = self
                .inner
                .reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if slot.is_none() && !self.is_cancelled() {
                *slot = Some(reason);
            }
        }
        self.cancel();
    }

    /// The reason given to [`CancellationToken::cancel_because`], if any.
    pub fn reason(&self) -> Option<StopReason> {
        self.inner
            .reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether [`CancellationToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// A future that completes once the token is cancelled.
    pub fn cancelled(&self) -> Cancelled<'_> {
        Cancelled { token: self }
    }
}

/// The future returned by [`CancellationToken::cancelled`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Cancelled<'a> {
    token: &'a CancellationToken,
}

impl Future for Cancelled<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.token.is_cancelled() {
            return Poll::Ready(());
        }
        {
            let mut wakers = self
                .token
                .inner
                .wakers
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !wakers.iter().any(|waker| waker.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
        }
        // Checked again after registering, so a cancel in between is not missed.
        if self.token.is_cancelled() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn wakes_a_waiting_future_from_another_thread() {
        let token = CancellationToken::new();
        assert!(token.cancelled().now_or_never().is_none());
        let remote = token.clone();
        let handle = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            remote.cancel();
        });
        futures::executor::block_on(token.cancelled());
        assert!(token.is_cancelled());
        handle.join().unwrap();
    }

    #[test]
    fn keeps_the_first_reason() {
        let token = CancellationToken::new();
        assert_eq!(token.reason(), None);
        token.cancel_because(StopReason::PageChanged {
            url: "http://b.test/".into(),
        });
        token.cancel_because(StopReason::Cancelled);
        assert!(token.is_cancelled());
        assert_eq!(
            token.reason(),
            Some(StopReason::PageChanged {
                url: "http://b.test/".into()
            })
        );
        let plain = CancellationToken::new();
        plain.cancel();
        plain.cancel_because(StopReason::PageChanged { url: String::new() });
        assert_eq!(plain.reason(), None, "a plain cancel came first");
    }
}
