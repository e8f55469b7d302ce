//! Each watch of the controller runs in a task of its own, keeps its copy
//! current, retries on its own after an error, and hands the controller
//! only what it touched, never an error.
//!
//! kube's controller merges its trigger streams into one and backs the
//! whole of it off after an error of any of them (client-go's policy,
//! growing to 30 s and more): during and after an API server outage every
//! watch's errors paused every trigger, and a member Pod deleted just
//! after the outage was recreated only by the next idle pass, 20 to 60 s
//! later (found by the chaos campaign: seed 94, an API server outage, then
//! a Pod deletion; before, every Pod deletion after the campaign's first
//! outage took that long). Here an error stays with its watch: it is
//! logged, the watch pauses ([`super::watch_backoff`]) and lists again, and
//! the other watches' triggers flow meanwhile.

use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt};
use kube::runtime::watcher;

/// How many touched objects may wait for the controller.
const BUFFER: usize = 256;

/// Runs `watch` (of `kind`) in a task of its own; the returned stream
/// yields what it touched, its errors logged and left out. The task ends
/// when the stream is dropped.
pub fn in_own_task<S, T>(
    kind: &'static str,
    watch: S,
) -> impl Stream<Item = Result<T, watcher::Error>> + Send + 'static
where
    S: Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    T: Send + 'static,
{
    let (mut sender, receiver) = mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let mut watch = std::pin::pin!(watch);
        while let Some(item) = watch.next().await {
            let touched = match item {
                Ok(touched) => touched,
                Err(error) => {
                    tracing::debug!(kind, %error, "watch error; listing again after a pause");
                    continue;
                }
            };
            if sender.send(Ok(touched)).await.is_err() {
                break;
            }
        }
    });
    receiver
}

#[cfg(test)]
mod tests {
    use futures::stream;

    use super::*;

    fn error() -> watcher::Error {
        watcher::Error::NoResourceVersion
    }

    #[tokio::test]
    async fn passes_what_was_touched_on_in_order_and_keeps_the_errors() {
        let items = (0..1000).map(|i| if i % 10 == 3 { Err(error()) } else { Ok(i) });
        let out: Vec<u32> = in_own_task("test", stream::iter(items))
            .map(|r| r.unwrap_or(u32::MAX))
            .collect()
            .await;
        let expected: Vec<u32> = (0..1000).filter(|i| i % 10 != 3).collect();
        assert_eq!(out, expected);
    }

    #[tokio::test]
    async fn a_watch_wakes_its_reader_on_its_own_timer() {
        let delayed = stream::once(async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            Ok::<u32, watcher::Error>(7)
        });
        let mut out = std::pin::pin!(in_own_task("test", delayed));
        assert!(matches!(out.next().await, Some(Ok(7))));
        assert!(out.next().await.is_none());
    }
}
