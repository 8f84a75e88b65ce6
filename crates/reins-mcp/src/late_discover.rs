//! A `server/discover` answered after the protocol library stopped waiting for it.
//!
//! When a server's revision is not pinned, rmcp starts a connection by sending `server/discover` and, if no answer
//! comes within its fixed ten seconds, falls back to the `initialize` handshake on the same connection. A server that
//! is merely slow to start (a Python interpreter on a loaded machine, `uvx` fetching its packages on a first run)
//! then answers the discovery after `initialize` was sent, and rmcp takes that answer for the handshake's and fails
//! ("conflict initialized response id"). [`LateDiscover`] wraps the transport: once an `initialize` follows an
//! unanswered discovery, the discovery's answer is dropped when it comes, so the handshake gets its own answer and
//! the server is spoken to in the earlier revision, as rmcp intended.

use rmcp::model::{ClientRequest, JsonRpcMessage, RequestId};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncRead, AsyncWrite};

/// A client transport that drops the answer to a discovery abandoned for `initialize` (see the module).
pub(crate) struct LateDiscover<T> {
    inner: T,
    /// The id of the discovery sent and not yet answered.
    discover: Option<RequestId>,
    /// The id of a discovery given up for `initialize`: its answer, when it comes, is nobody's.
    abandoned: Option<RequestId>,
}

impl<R, W> LateDiscover<AsyncRwTransport<RoleClient, R, W>>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// The client transport over a server's standard output `read` and standard input `write`.
    pub(crate) fn over(read: R, write: W) -> Self {
        LateDiscover { inner: AsyncRwTransport::new_client(read, write), discover: None, abandoned: None }
    }
}

impl<T> LateDiscover<T> {
    /// Notes what `message`, about to be sent, starts or gives up.
    fn sending(&mut self, message: &TxJsonRpcMessage<RoleClient>) {
        if let JsonRpcMessage::Request(r) = message {
            match &r.request {
                ClientRequest::DiscoverRequest(_) => self.discover = Some(r.id.clone()),
                ClientRequest::InitializeRequest(_) => self.abandoned = self.discover.take(),
                _ => {}
            }
        }
    }

    /// Whether `message`, just received, is to be passed on (false: the abandoned discovery's answer).
    fn keep(&mut self, message: &RxJsonRpcMessage<RoleClient>) -> bool {
        let id = match message {
            JsonRpcMessage::Response(r) => &r.id,
            JsonRpcMessage::Error(e) => match &e.id {
                Some(id) => id,
                None => return true,
            },
            _ => return true,
        };
        if self.abandoned.as_ref() == Some(id) {
            self.abandoned = None;
            return false;
        }
        if self.discover.as_ref() == Some(id) {
            self.discover = None;
        }
        true
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for LateDiscover<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.sending(&item);
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            if self.keep(&message) {
                return Some(message);
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}
