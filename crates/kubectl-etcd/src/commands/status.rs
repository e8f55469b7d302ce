//! `kubectl etcd status <cluster> [-o json]`.

use k8s_openapi::jiff::Timestamp;

use super::get_cluster;
use crate::args::Output;
use crate::connect::Target;
use crate::error::Failure;
use crate::render;

pub async fn run(target: &Target, name: &str, output: Output) -> Result<(), Failure> {
    let cluster = get_cluster(target, name).await?;
    let report = render::report(&cluster);
    match output {
        Output::Text => print!("{}", render::text(&report, Timestamp::now())),
        Output::Json => println!("{}", render::json(&report)),
    }
    Ok(())
}
