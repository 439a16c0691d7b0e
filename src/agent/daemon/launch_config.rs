//! The daemon's start-up configuration from its launcher, read from stdin: the environment
//! every exec starts from (the workspace's env and secret values), the user commands run as and
//! their resource limits.
//!
//! Stdin rather than argv or the daemon's own environment: those are readable by other
//! processes (`/proc/*/cmdline`, `/proc/*/environ`) and, for the environment, would also apply
//! to the processes that start the daemon (a workspace's `LD_PRELOAD` must never reach them).

use std::ffi::OsString;

use serde_json::{Map, Value};

use crate::agent::process::{CommandUser, Confinement, Limit};

/// What the launcher gave.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LaunchConfig {
    /// The execs' base environment (their spec's `env` is added to it).
    pub env: Vec<(OsString, OsString)>,
    /// Whether the launcher sent `env`; without it the daemon's own environment is the execs'.
    pub env_given: bool,
    pub confinement: Confinement,
    /// The agent's own steps (git with a token): another user, so that commands cannot read
    /// their memory or environment; the same limits.
    pub agent_confinement: Confinement,
    /// The uid the agent's own files (exec logs, records) belong to, when commands run as
    /// another: file operations on the workspace run as the commands' user instead.
    pub workspace_user: Option<CommandUser>,
    /// The key the gateway's `Hello` must carry; commands never see it.
    pub channel_key: Option<String>,
    /// Where the agent is its container's root (Modal): the commands' home, which the agent
    /// makes theirs at start (`command_home::prepare_home`), and the name they run under.
    pub command_home: Option<CommandHome>,
    /// The workspace's first start, before any command ran: what the image put in the root
    /// becomes the commands' user's (`command_home::claim_tree`).
    pub claim_root: bool,
    /// Volumes' mount points: each becomes the commands' user's when it is root's
    /// (`command_home::claim_dir`), so they can write below it.
    pub volume_roots: Vec<std::path::PathBuf>,
}

/// The commands' `HOME` and `USER` where the agent makes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandHome {
    pub path: std::path::PathBuf,
    pub user_name: String,
}

/// Parses `{"env": {NAME: VALUE}, "user": {"uid": N, "gid": N}, "agent_user": {…},
/// "limits": {NAME: N}, "channel_key": HEX, "home": {"path": ABS, "user_name": NAME},
/// "claim_root": BOOL}`; every key is optional (`home` and `claim_root` need `user`), unknown
/// keys are refused (a launcher and agent out of step must not start).
pub fn parse(bytes: &[u8]) -> Result<LaunchConfig, String> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("the launch configuration: {e}"))?;
    let Value::Object(top) = value else {
        return Err("the launch configuration must be a JSON object".into());
    };
    let mut config = LaunchConfig::default();
    for (key, value) in &top {
        match key.as_str() {
            "env" => {
                config.env = env(value)?;
                config.env_given = true;
            }
            "user" => {
                let user = user(value)?;
                config.confinement.user = Some(user);
                config.workspace_user = Some(user);
            }
            "limits" => {
                let limits = limits(value)?;
                config.confinement.limits.clone_from(&limits);
                config.agent_confinement.limits = limits;
            }
            "agent_user" => config.agent_confinement.user = Some(user(value)?),
            "channel_key" => config.channel_key = Some(channel_key(value)?),
            "home" => config.command_home = Some(home(value)?),
            "volume_roots" => config.volume_roots = volume_roots(value)?,
            "claim_root" => {
                config.claim_root = value
                    .as_bool()
                    .ok_or("the launch configuration's 'claim_root' must be true or false")?;
            }
            other => {
                return Err(format!(
                    "the launch configuration has an unknown key '{other}'"
                ))
            }
        }
    }
    let for_user = config.command_home.is_some() || config.claim_root;
    if config.workspace_user.is_none() && (for_user || !config.volume_roots.is_empty()) {
        return Err(
            "the launch configuration's 'home', 'claim_root' and 'volume_roots' need a 'user'"
                .into(),
        );
    }
    Ok(config)
}

/// An absolute path of plain names, at most 256 bytes.
fn plain_path(path: &str) -> bool {
    path.starts_with('/')
        && path.len() <= 256
        && path[1..]
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\0'))
}

fn volume_roots(value: &Value) -> Result<Vec<std::path::PathBuf>, String> {
    let items = value
        .as_array()
        .filter(|items| items.len() <= 64)
        .ok_or("the launch configuration's 'volume_roots' must be a list of at most 64 paths")?;
    items
        .iter()
        .map(|item| match item.as_str() {
            Some(path) if plain_path(path) => Ok(path.into()),
            _ => Err("volume_roots must be absolute paths of plain names".to_owned()),
        })
        .collect()
}

fn home(value: &Value) -> Result<CommandHome, String> {
    let map = object(value, "home")?;
    let text = |key: &str| {
        map.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("the launch configuration's 'home.{key}' must be a string"))
    };
    if let Some(other) = map.keys().find(|k| *k != "path" && *k != "user_name") {
        return Err(format!(
            "the launch configuration's 'home' has an unknown key '{other}'"
        ));
    }
    let path = text("path")?;
    if !plain_path(path) {
        return Err("home.path must be an absolute path of plain names".into());
    }
    let user_name = text("user_name")?;
    let mut chars = user_name.chars();
    let name_ok = user_name.len() <= 32
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !name_ok {
        return Err("home.user_name must be a user name ([a-z_][a-z0-9_-]*, at most 32)".into());
    }
    Ok(CommandHome {
        path: path.into(),
        user_name: user_name.to_owned(),
    })
}

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("the launch configuration's '{what}' must be an object"))
}

fn env(value: &Value) -> Result<Vec<(OsString, OsString)>, String> {
    object(value, "env")?
        .iter()
        .map(|(name, value)| {
            let name = crate::policy::env_name(name).map_err(|e| format!("env: {}", e.message))?;
            match value.as_str() {
                Some(text) if !text.contains('\0') => Ok((name.into(), text.into())),
                _ => Err(format!("env.{name} must be a string without NUL")),
            }
        })
        .collect()
}

fn number(map: &Map<String, Value>, key: &str, what: &str) -> Result<u64, String> {
    map.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("the launch configuration's '{what}.{key}' must be a whole number"))
}

fn user(value: &Value) -> Result<CommandUser, String> {
    let map = object(value, "user")?;
    let id = |key: &str| {
        let n = number(map, key, "user")?;
        // Root is never a command's user: that is what this setting exists to avoid.
        u32::try_from(n)
            .ok()
            .filter(|&n| n != 0)
            .ok_or_else(|| format!("user.{key} must be a uid/gid other than 0"))
    };
    Ok(CommandUser {
        uid: id("uid")?,
        gid: id("gid")?,
    })
}

fn channel_key(value: &Value) -> Result<String, String> {
    match value.as_str() {
        Some(key)
            if (32..=256).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            Ok(key.to_owned())
        }
        _ => Err("channel_key must be 32 to 256 hex digits".into()),
    }
}

fn limits(value: &Value) -> Result<Vec<(Limit, u64)>, String> {
    let map = object(value, "limits")?;
    map.keys()
        .map(|name| {
            let limit = Limit::from_name(name).ok_or_else(|| format!("unknown limit '{name}'"))?;
            Ok((limit, number(map, name, "limits")?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_a_full_configuration_is_read() {
        let config = parse(
            br#"{"env": {"A": "1", "LD_PRELOAD": "x.so"}, "user": {"uid": 1000, "gid": 1000},
                 "limits": {"processes": 256, "address_space_bytes": 134217728},
                 "channel_key": "00112233445566778899aabbccddeeff"}"#,
        )
        .unwrap();
        assert_eq!(
            config.env,
            vec![
                ("A".into(), "1".into()),
                ("LD_PRELOAD".into(), "x.so".into())
            ]
        );
        assert_eq!(
            config.confinement.user,
            Some(CommandUser {
                uid: 1000,
                gid: 1000
            })
        );
        assert!(config.env_given);
        assert_eq!(config.confinement.limits.len(), 2);
        assert_eq!(
            config.channel_key.as_deref(),
            Some("00112233445566778899aabbccddeeff")
        );
    }

    #[test]
    fn test_a_home_and_a_claim_are_read_with_their_user() {
        let config = parse(
            br#"{"user": {"uid": 1000, "gid": 1000}, "claim_root": true,
                 "home": {"path": "/home/workspace", "user_name": "workspace"},
                 "volume_roots": ["/data", "/workspace/cache"]}"#,
        )
        .unwrap();
        assert!(config.claim_root);
        assert_eq!(config.volume_roots.len(), 2);
        assert_eq!(
            config.command_home,
            Some(CommandHome {
                path: "/home/workspace".into(),
                user_name: "workspace".into()
            })
        );
    }

    #[test]
    fn test_an_empty_configuration_confines_nothing() {
        assert_eq!(parse(b"{}").unwrap(), LaunchConfig::default());
    }

    #[test]
    fn test_a_key_alone_leaves_the_environment_to_the_daemon() {
        let config = parse(br#"{"channel_key": "00112233445566778899aabbccddeeff"}"#).unwrap();
        assert!(!config.env_given && config.env.is_empty());
        assert!(config.channel_key.is_some());
    }

    #[test]
    fn test_bad_configurations_are_refused_with_a_reason() {
        for (bad, needle) in [
            (&b"[]"[..], "object"),
            (br#"{"env": {"1A": "x"}}"#, "env"),
            (br#"{"env": {"A": 1}}"#, "env.A"),
            (br#"{"user": {"uid": 0, "gid": 5}}"#, "user.uid"),
            (br#"{"user": {"uid": 5}}"#, "user.gid"),
            (br#"{"limits": {"stack": 1}}"#, "unknown limit"),
            (br#"{"limits": {"processes": -1}}"#, "limits.processes"),
            (br#"{"extra": 1}"#, "unknown key"),
            (br#"{"channel_key": "short"}"#, "channel_key"),
            (b"not json", "launch configuration"),
            (br#"{"claim_root": true}"#, "need a 'user'"),
            (br#"{"volume_roots": ["/data"]}"#, "need a 'user'"),
            (
                br#"{"user": {"uid": 5, "gid": 5}, "volume_roots": ["data"]}"#,
                "volume_roots",
            ),
            (
                br#"{"user": {"uid": 5, "gid": 5}, "volume_roots": "/data"}"#,
                "volume_roots",
            ),
            (
                br#"{"home": {"path": "/home/w", "user_name": "w"}}"#,
                "need a 'user'",
            ),
            (
                br#"{"user": {"uid": 5, "gid": 5}, "home": {"path": "/a/../b", "user_name": "w"}}"#,
                "home.path",
            ),
            (
                br#"{"user": {"uid": 5, "gid": 5}, "home": {"path": "rel", "user_name": "w"}}"#,
                "home.path",
            ),
            (
                br#"{"user": {"uid": 5, "gid": 5}, "home": {"path": "/h", "user_name": "Root!"}}"#,
                "home.user_name",
            ),
            (
                br#"{"user": {"uid": 5, "gid": 5}, "home": {"path": "/h", "user_name": "w", "x": 1}}"#,
                "unknown key",
            ),
            (
                br#"{"user": {"uid": 5, "gid": 5}, "claim_root": "yes"}"#,
                "claim_root",
            ),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }
}
