//! The parts of an OCI image's configuration a kubelet applies to a
//! container: entrypoint and command, environment, working directory and
//! user.

use serde::Deserialize;

/// What the image says about how to run it (`config` of the OCI image
/// configuration); empty for images of the fast path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `NAME=value` entries split at the first `=`, in order.
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    /// `uid`, `uid:gid`, or a name (names are not looked up).
    pub user: Option<String>,
}

#[derive(Deserialize)]
struct ConfigFile {
    #[serde(default)]
    config: Option<RunConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RunConfig {
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    user: Option<String>,
}

impl ImageConfig {
    /// Reads an OCI image configuration document.
    pub fn parse(json: &[u8]) -> Result<Self, serde_json::Error> {
        let file: ConfigFile = serde_json::from_slice(json)?;
        let Some(run) = file.config else {
            return Ok(Self::default());
        };
        let env = run
            .env
            .unwrap_or_default()
            .into_iter()
            .map(|entry| match entry.split_once('=') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => (entry, String::new()),
            })
            .collect();
        Ok(Self {
            entrypoint: run.entrypoint.unwrap_or_default(),
            cmd: run.cmd.unwrap_or_default(),
            env,
            working_dir: run.working_dir.filter(|d| !d.is_empty()),
            user: run.user.filter(|u| !u.is_empty()),
        })
    }

    /// The command line by Kubernetes' rule: `command` replaces the
    /// entrypoint and drops the image's `Cmd`; `args` replace `Cmd`.
    pub fn argv(&self, command: &[String], args: &[String]) -> Vec<String> {
        let (head, tail) = match (command.is_empty(), args.is_empty()) {
            (true, true) => (&self.entrypoint, &self.cmd),
            (true, false) => (&self.entrypoint, &args.to_vec()),
            (false, _) => (&command.to_vec(), &args.to_vec()),
        };
        head.iter().chain(tail.iter()).cloned().collect()
    }

    /// The numeric user and group of `User`, where it is numeric.
    pub fn uid_gid(&self) -> (Option<u32>, Option<u32>) {
        let Some(user) = &self.user else {
            return (None, None);
        };
        let (uid, gid) = match user.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (user.as_str(), None),
        };
        (uid.parse().ok(), gid.and_then(|g| g.parse().ok()))
    }

    /// `env` (the container's) with the image's variables under it: a
    /// variable the container sets wins, except that the lab's default
    /// `PATH` gives way to the image's.
    pub fn merge_env(
        &self,
        env: Vec<(String, String)>,
        default_path: &str,
    ) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::with_capacity(env.len() + self.env.len());
        for (k, v) in &self.env {
            let set_by_container = env
                .iter()
                .any(|(ck, cv)| ck == k && !(k == "PATH" && cv == default_path));
            if !set_by_container {
                out.push((k.clone(), v.clone()));
            }
        }
        for (k, v) in env {
            let replaced_default =
                k == "PATH" && v == default_path && out.iter().any(|(o, _)| o == "PATH");
            if !replaced_default {
                out.push((k, v));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd_like() -> ImageConfig {
        ImageConfig::parse(
            br#"{"architecture":"amd64","config":{"Env":["PATH=/usr/local/bin:/bin","SSL=1"],
                "Entrypoint":["/usr/local/bin/etcd-operator"],"Cmd":["run"],
                "WorkingDir":"/var/lib/etcd","User":"65532:65533"}}"#,
        )
        .expect("parse")
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn command_and_args_follow_the_kubernetes_rule() {
        let c = etcd_like();
        assert_eq!(
            c.argv(&[], &[]),
            strings(&["/usr/local/bin/etcd-operator", "run"])
        );
        assert_eq!(
            c.argv(&[], &strings(&["member-guard"])),
            strings(&["/usr/local/bin/etcd-operator", "member-guard"])
        );
        assert_eq!(c.argv(&strings(&["/bin/x"]), &[]), strings(&["/bin/x"]));
        assert_eq!(
            c.argv(&strings(&["/bin/x"]), &strings(&["a"])),
            strings(&["/bin/x", "a"])
        );
    }

    #[test]
    fn user_and_working_dir() {
        let c = etcd_like();
        assert_eq!(c.uid_gid(), (Some(65532), Some(65533)));
        assert_eq!(c.working_dir.as_deref(), Some("/var/lib/etcd"));
        let named = ImageConfig {
            user: Some("nonroot".into()),
            ..ImageConfig::default()
        };
        assert_eq!(named.uid_gid(), (None, None));
    }

    #[test]
    fn container_variables_win_but_the_default_path_gives_way() {
        let c = etcd_like();
        let env = vec![
            ("PATH".to_owned(), "/default".to_owned()),
            ("SSL".to_owned(), "0".to_owned()),
        ];
        let merged = c.merge_env(env, "/default");
        assert_eq!(
            merged,
            vec![
                ("PATH".to_owned(), "/usr/local/bin:/bin".to_owned()),
                ("SSL".to_owned(), "0".to_owned()),
            ]
        );
        let own_path = vec![("PATH".to_owned(), "/mine".to_owned())];
        let merged = c.merge_env(own_path, "/default");
        assert!(merged.contains(&("PATH".to_owned(), "/mine".to_owned())));
        assert!(!merged.iter().any(|(_, v)| v == "/usr/local/bin:/bin"));
    }

    #[test]
    fn a_config_without_run_settings_is_empty() {
        assert_eq!(
            ImageConfig::parse(br#"{"architecture":"amd64"}"#).expect("parse"),
            ImageConfig::default()
        );
    }
}
