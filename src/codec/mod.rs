//! Wire framing of lists and watch events, assembled from cached bytes without
//! re-serialising objects.

pub mod continue_token;
pub mod go_json;
pub mod gzip;
pub mod list;
pub mod proto_list;
