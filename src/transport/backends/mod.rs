//! Each transport as a whole, as the engine sees it: one [`Backend`](super::Backend) per
//! transport folder, layered over it. They sit above the transports and their [`Route`](super::Route)
//! (which names every transport's peer type) so that no transport folder needs the trait:
//! the folders hold the data paths, these files hold what the engine asks of each.

mod rdma;
mod samehost;
mod shared_buffers;
mod tcp;

pub use rdma::RdmaBackend;
pub use samehost::SameHostBackend;
pub use shared_buffers::SharedBuffersBackend;
pub use tcp::{DataServerConfig, TcpBackend};
