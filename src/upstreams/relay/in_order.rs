//! The upstream's message stream as rmcp reads it, with its progress and log notifications taken
//! off in arrival order and handed to the running calls first (see the parent module).

use std::sync::Arc;

use rmcp::model::{JsonRpcMessage, ServerNotification};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use super::Relay;

/// An upstream transport whose progress and log notifications go to the running calls in the
/// order they arrive; every other message goes on to rmcp.
pub struct InOrder<T> {
    inner: T,
    relay: Arc<Relay>,
}

impl<T> InOrder<T> {
    pub fn new(inner: T, relay: Arc<Relay>) -> Self {
        Self { inner, relay }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for InOrder<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            if let JsonRpcMessage::Notification(notification) = &message {
                match &notification.notification {
                    ServerNotification::ProgressNotification(progress) => {
                        self.relay.progress(&progress.params).await;
                        continue;
                    }
                    #[allow(deprecated)]
                    ServerNotification::LoggingMessageNotification(log) => {
                        self.relay.log(&log.params).await;
                        continue;
                    }
                    _ => {}
                }
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
