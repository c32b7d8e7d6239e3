//! Turns an async function that emits events into a [`Stream`] of them, with back-pressure:
//! after each emit the function waits until the consumer has taken the event. So the loop never
//! runs ahead of its consumer, and a cancel issued on seeing an event is noticed before the
//! loop does anything else.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use futures::Stream;
use futures::future::LocalBoxFuture;
use futures::stream::LocalBoxStream;

type Queue<T> = Rc<RefCell<VecDeque<T>>>;

/// The sending side handed to the driver function.
pub(crate) struct Emitter<T> {
    queue: Queue<T>,
}

impl<T> Emitter<T> {
    /// Queues `item` and completes once the consumer has taken it.
    pub(crate) fn emit(&self, item: T) -> Delivered<T> {
        self.queue.borrow_mut().push_back(item);
        Delivered {
            queue: Rc::clone(&self.queue),
        }
    }
}

/// Completes when the queue is empty.
pub(crate) struct Delivered<T> {
    queue: Queue<T>,
}

impl<T> Future for Delivered<T> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        // No waker is needed: the driver is only polled from `EventStream::poll_next`, which
        // returns the queued item instead of `Pending` and is polled again by the consumer.
        if self.queue.borrow().is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

struct EventStream<'a, T> {
    queue: Queue<T>,
    driver: Option<LocalBoxFuture<'a, ()>>,
}

impl<T> Stream for EventStream<'_, T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(item) = self.queue.borrow_mut().pop_front() {
            return Poll::Ready(Some(item));
        }
        let Some(driver) = self.driver.as_mut() else {
            return Poll::Ready(None);
        };
        let finished = driver.as_mut().poll(cx).is_ready();
        if finished {
            self.driver = None;
        }
        match self.queue.borrow_mut().pop_front() {
            Some(item) => Poll::Ready(Some(item)),
            None if finished => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

/// Runs `driver` as the stream is polled; yields what it emits.
pub(crate) fn event_stream<'a, T: 'a, F>(
    driver: impl FnOnce(Emitter<T>) -> F,
) -> LocalBoxStream<'a, T>
where
    F: Future<Output = ()> + 'a,
{
    let queue: Queue<T> = Rc::new(RefCell::new(VecDeque::new()));
    let future = driver(Emitter {
        queue: Rc::clone(&queue),
    });
    Box::pin(EventStream {
        queue,
        driver: Some(Box::pin(future)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::cell::Cell;

    #[test]
    fn the_driver_waits_for_each_item_to_be_taken() {
        let progress = Rc::new(Cell::new(0));
        let seen = Rc::clone(&progress);
        let mut stream = event_stream(move |out: Emitter<u32>| async move {
            for i in 0..3 {
                seen.set(i);
                out.emit(i).await;
            }
            seen.set(10);
        });
        futures::executor::block_on(async {
            assert_eq!(stream.next().await, Some(0));
            assert_eq!(progress.get(), 0);
            assert_eq!(stream.next().await, Some(1));
            assert_eq!(progress.get(), 1);
            assert_eq!(stream.next().await, Some(2));
            assert_eq!(stream.next().await, None);
            assert_eq!(progress.get(), 10);
            assert_eq!(stream.next().await, None);
        });
    }
}
