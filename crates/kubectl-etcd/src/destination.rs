//! A backup destination from the command line's flags (pure).

use etcd_operator_api::api::{
    AzureDestination, BackupDestination, BackupEncryption, DEFAULT_ENCRYPTION_KEY, GcsDestination,
    LocalDestination, S3Destination, VolumeClaimDestination,
};

use crate::args::DestinationArgs;
use crate::error::Failure;

/// Where the flags say backups are.
#[derive(Debug, Clone, PartialEq)]
pub enum Wanted {
    /// The destination of this `EtcdBackupSchedule`.
    Schedule(String),
    /// A destination given in full.
    Given(Box<BackupDestination>),
    /// No flag at all.
    Unset,
}

/// The destination the flags name: exactly one kind, as the CRD demands.
pub fn from_flags(flags: &DestinationArgs) -> Result<Wanted, Failure> {
    if let Some(schedule) = &flags.schedule {
        return Ok(Wanted::Schedule(schedule.clone()));
    }
    let kinds = [
        flags.pvc.is_some(),
        flags.s3_bucket.is_some(),
        flags.gcs_bucket.is_some(),
        flags.azure_container.is_some(),
        flags.local_path.is_some(),
    ];
    match kinds.iter().filter(|k| **k).count() {
        0 => return Ok(Wanted::Unset),
        1 => {}
        _ => {
            return Err(Failure::new(
                "more than one destination given",
                "give exactly one of --pvc, --s3-bucket, --gcs-bucket, --azure-container, --local-path (or --from-schedule)",
            ));
        }
    }
    let mut destination = BackupDestination {
        encryption: flags
            .encryption_secret
            .as_ref()
            .map(|secret| BackupEncryption {
                secret_name: secret.clone(),
                key: flags
                    .encryption_key
                    .clone()
                    .unwrap_or_else(|| DEFAULT_ENCRYPTION_KEY.to_string()),
            }),
        ..BackupDestination::default()
    };
    if let Some(claim) = &flags.pvc {
        destination.persistent_volume_claim = Some(VolumeClaimDestination {
            claim_name: claim.clone(),
            path: flags.prefix.clone(),
        });
    } else if let Some(bucket) = &flags.s3_bucket {
        destination.s3 = Some(S3Destination {
            bucket: bucket.clone(),
            prefix: flags.prefix.clone(),
            endpoint: flags.endpoint.clone(),
            region: flags.region.clone(),
            credentials_secret: flags.credentials_secret.clone(),
            force_path_style: flags.force_path_style,
        });
    } else if let Some(bucket) = &flags.gcs_bucket {
        destination.gcs = Some(GcsDestination {
            bucket: bucket.clone(),
            prefix: flags.prefix.clone(),
            endpoint: flags.endpoint.clone(),
            credentials_secret: flags.credentials_secret.clone(),
        });
    } else if let Some(container) = &flags.azure_container {
        destination.azure = Some(AzureDestination {
            account: flags.azure_account.clone().unwrap_or_default(),
            container: container.clone(),
            prefix: flags.prefix.clone(),
            endpoint: flags.endpoint.clone(),
            credentials_secret: flags.credentials_secret.clone(),
        });
    } else if let Some(path) = &flags.local_path {
        destination.local = Some(LocalDestination { path: path.clone() });
    }
    Ok(Wanted::Given(Box::new(destination)))
}

/// The destination in a few words, for what a command prints.
pub fn describe(destination: &BackupDestination) -> String {
    let place = if let Some(claim) = &destination.persistent_volume_claim {
        format!("PVC {}", claim.claim_name)
    } else if let Some(s3) = &destination.s3 {
        format!("s3://{}", s3.bucket)
    } else if let Some(gcs) = &destination.gcs {
        format!("gs://{}", gcs.bucket)
    } else if let Some(azure) = &destination.azure {
        format!("az://{}/{}", azure.account, azure.container)
    } else if let Some(local) = &destination.local {
        format!("file://{}", local.path)
    } else {
        "nowhere".to_string()
    };
    let prefix = destination
        .prefix()
        .map(|p| format!(" under {p}/"))
        .unwrap_or_default();
    let encrypted = destination
        .encryption
        .as_ref()
        .map(|e| format!(", encrypted with Secret {}", e.secret_name))
        .unwrap_or_default();
    format!("{place}{prefix}{encrypted}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_with_a_path() {
        let flags = DestinationArgs {
            pvc: Some("backups".into()),
            prefix: Some("etcd".into()),
            ..Default::default()
        };
        let Ok(Wanted::Given(destination)) = from_flags(&flags) else {
            panic!("a destination");
        };
        let claim = destination.persistent_volume_claim.clone().expect("claim");
        assert_eq!(claim.claim_name, "backups");
        assert_eq!(claim.path.as_deref(), Some("etcd"));
        assert_eq!(describe(&destination), "PVC backups under etcd/");
    }

    #[test]
    fn s3_with_encryption_takes_the_default_key() {
        let flags = DestinationArgs {
            s3_bucket: Some("b".into()),
            endpoint: Some("http://minio:9000".into()),
            force_path_style: true,
            encryption_secret: Some("key".into()),
            ..Default::default()
        };
        let Ok(Wanted::Given(destination)) = from_flags(&flags) else {
            panic!("a destination");
        };
        assert!(destination.s3.as_ref().is_some_and(|s| s.force_path_style));
        assert_eq!(
            destination.encryption.map(|e| e.key).as_deref(),
            Some(DEFAULT_ENCRYPTION_KEY)
        );
    }

    #[test]
    fn one_kind_only_and_a_schedule_wins() {
        let two = DestinationArgs {
            pvc: Some("a".into()),
            local_path: Some("/b".into()),
            ..Default::default()
        };
        assert!(from_flags(&two).is_err());
        let schedule = DestinationArgs {
            schedule: Some("hourly".into()),
            ..Default::default()
        };
        assert_eq!(from_flags(&schedule), Ok(Wanted::Schedule("hourly".into())));
        assert_eq!(from_flags(&DestinationArgs::default()), Ok(Wanted::Unset));
    }
}
