//! `kubectl etcd approve-recovery <cluster> [--yes]`: shows the restore the
//! cluster waits for and what it keeps and loses, asks, then writes the
//! approval with the resourceVersion it was decided on (a cluster that
//! changed meanwhile refuses it, unless the restore it shows is exactly the
//! same when read again).

use std::io::{BufRead, IsTerminal, Write};

use etcd_operator_api::api::EtcdCluster;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{cluster_subject, clusters, get_cluster, namespace_flag, wait};
use crate::approval::{self, Choice, Decision, Plan};
use crate::args::ApproveArgs;
use crate::connect::Target;
use crate::error::{Failure, api_failure};

pub async fn run(target: &Target, args: &ApproveArgs) -> Result<(), Failure> {
    let name = args.cluster.as_str();
    let cluster = get_cluster(target, name).await?;
    let choice = args.survivor.as_ref().map(|survivor| Choice {
        survivor: survivor.clone(),
        revision: args.revision,
    });
    let ns = namespace_flag(target);
    let plan = match approval::decide(&cluster, choice.as_ref()) {
        Decision::Approve(plan) => plan,
        Decision::AlreadyApproved(plan) => {
            println!(
                "{name}: this restore is already approved ({}); the operator carries it out.\n  follow: kubectl etcd status {name} {ns}",
                plan.recovery_patch()
            );
            return Ok(());
        }
        Decision::Nothing { why, next } => {
            return Err(Failure::new(format!("nothing to approve: {why}"), next));
        }
        Decision::Stale { why, next } => {
            return Err(Failure::new(format!("not approved: {why}"), next));
        }
        Decision::ChooseSurvivor { why, candidates } => {
            let listed: Vec<String> = candidates
                .iter()
                .map(|(m, r)| {
                    format!(
                        "{m} (last at revision {})",
                        r.map_or("unknown".to_string(), |r| r.to_string())
                    )
                })
                .collect();
            return Err(Failure::new(
                format!("the newest survivor is not known yet: {why}"),
                format!(
                    "wait for the survivors to answer and run again, or choose one of {}: kubectl etcd approve-recovery {name} {ns} --survivor <member> [--revision <revision>]",
                    listed.join(", ")
                ),
            ));
        }
    };
    print_plan(name, &plan);
    if !args.yes {
        confirm(name, &ns)?;
    }
    write_approval(target, name, &plan, cluster, choice.as_ref()).await?;
    println!(
        "approved: spec.recovery {}\n  follow: kubectl etcd status {name} {ns}",
        plan.recovery_patch()
    );
    if args.wait.wait {
        wait::cluster_ready(target, name, args.wait.timeout).await?;
    }
    Ok(())
}

/// How many times the approval is written again when the cluster changed
/// (its status, written by the operator) but the restore shown did not.
const UNCHANGED_PLAN_ATTEMPTS: u32 = 3;

/// Writes the approval with the resourceVersion it was decided on. When the
/// cluster changed meanwhile, it is read again: the approval is written
/// only if the restore it describes, and what it keeps and loses, are still
/// exactly those shown; otherwise nothing is written.
async fn write_approval(
    target: &Target,
    name: &str,
    plan: &Plan,
    mut cluster: EtcdCluster,
    choice: Option<&Choice>,
) -> Result<(), Failure> {
    let mut attempt = 1;
    loop {
        let written = clusters(target)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": { "resourceVersion": cluster.metadata.resource_version.clone() },
                    "spec": { "recovery": plan.recovery_patch() },
                })),
            )
            .await;
        let error = match written {
            Ok(_) => return Ok(()),
            Err(error) => error,
        };
        let conflict = matches!(&error, kube::Error::Api(status) if status.code == 409);
        if !conflict || attempt >= UNCHANGED_PLAN_ATTEMPTS {
            return Err(api_failure(error, &cluster_subject(target, name)));
        }
        let fresh = get_cluster(target, name).await?;
        if !approval::same_restore(plan, &fresh, choice) {
            return Err(api_failure(error, &cluster_subject(target, name)));
        }
        cluster = fresh;
        attempt += 1;
    }
}

fn print_plan(name: &str, plan: &Plan) {
    println!(
        "{name}: the data of a majority is lost (incarnation {}).",
        plan.incarnation
    );
    for line in plan.consequences() {
        println!("  {line}");
    }
}

/// Asks on the terminal; refuses when nobody can answer.
fn confirm(name: &str, ns: &str) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::new(
            "not approved: stdin is not a terminal, so nobody can confirm",
            format!(
                "read the above, then run again with --yes: kubectl etcd approve-recovery {name} {ns} --yes"
            ),
        ));
    }
    print!("Approve this restore? Type the cluster name ({name}) to confirm: ");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer).map_err(|e| {
        Failure::new(
            format!("cannot read the answer: {e}"),
            "run again, or with --yes",
        )
    })?;
    if answer.trim() != name {
        return Err(Failure::new(
            "not approved: the answer was not the cluster's name",
            "nothing was changed; run again when you are sure",
        ));
    }
    Ok(())
}
