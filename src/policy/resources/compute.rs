//! CPU and memory: a request (what Modal reserves) and a hard limit (where Modal throttles the
//! CPU or kills for memory), each within what Modal schedules, the limit never below the request.

use crate::policy::error::PolicyError;

/// Modal's smallest CPU request (its default reservation), in physical cores.
pub const MIN_CPU_CORES: f64 = 0.125;
/// The most cores a workspace may ask for.
pub const MAX_CPU_CORES: f64 = 64.0;
/// Modal's smallest memory request (its default reservation), in MiB.
pub const MIN_MEMORY_MIB: i64 = 128;
/// The most memory a workspace may ask for, in MiB (256 GiB).
pub const MAX_MEMORY_MIB: i64 = 262_144;

/// A CPU request in cores, canonical: whole thousandths, because the SDK sends millicores and
/// would silently truncate anything finer.
pub fn cpu_cores(value: f64) -> Result<f64, PolicyError> {
    let what = format!("CPU is from {MIN_CPU_CORES} to {MAX_CPU_CORES} cores, in steps of 0.001");
    if !value.is_finite() || !(MIN_CPU_CORES..=MAX_CPU_CORES).contains(&value) {
        return Err(PolicyError::new("cpu.range", what, &value.to_string()));
    }
    let milli = (value * 1000.0).round();
    if (value * 1000.0 - milli).abs() > 1e-6 {
        return Err(PolicyError::new("cpu.precision", what, &value.to_string()));
    }
    Ok(milli / 1000.0)
}

/// A hard CPU limit in cores: a CPU value (`cpu_cores`) not below the request, when there is one.
pub fn cpu_limit(request: Option<f64>, limit: f64) -> Result<f64, PolicyError> {
    let request = request.map(cpu_cores).transpose()?;
    at_least_request(
        request,
        cpu_cores(limit)?,
        LimitRule {
            rule: "cpu.limit-below-request",
            unit: "cores",
            request_field: "resources.cpu",
            why: "the limit is where Modal throttles the workspace, the request what it reserves",
        },
    )
}

/// A memory request in MiB, within Modal's bounds.
pub fn memory_mib(value: i64) -> Result<i64, PolicyError> {
    if !(MIN_MEMORY_MIB..=MAX_MEMORY_MIB).contains(&value) {
        return Err(PolicyError::new(
            "memory.range",
            format!("memory is from {MIN_MEMORY_MIB} to {MAX_MEMORY_MIB} MiB"),
            &value.to_string(),
        ));
    }
    Ok(value)
}

/// A hard memory limit in MiB: a memory value (`memory_mib`) not below the request, when there
/// is one.
pub fn memory_limit_mib(request: Option<i64>, limit: i64) -> Result<i64, PolicyError> {
    let request = request.map(memory_mib).transpose()?;
    at_least_request(
        request,
        memory_mib(limit)?,
        LimitRule {
            rule: "memory.limit-below-request",
            unit: "MiB",
            request_field: "resources.memory_mb",
            why: "past the limit the workspace's processes are killed",
        },
    )
}

/// How a limit below its request is refused.
struct LimitRule {
    rule: &'static str,
    unit: &'static str,
    request_field: &'static str,
    why: &'static str,
}

fn at_least_request<T: PartialOrd + std::fmt::Display>(
    request: Option<T>,
    limit: T,
    r: LimitRule,
) -> Result<T, PolicyError> {
    match request {
        Some(request) if limit < request => Err(PolicyError::without_echo(
            r.rule,
            format!(
                "the limit ({limit} {}) must be at least the request, {} ({request}): {}",
                r.unit, r.request_field, r.why
            ),
        )),
        _ => Ok(limit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_limits_within_bounds_pass_canonical() {
        assert_eq!(cpu_cores(1.5).unwrap(), 1.5);
        assert_eq!(cpu_cores(0.125).unwrap(), 0.125);
        // 0.1 + 0.2 is not 0.3 in binary: whole thousandths are kept exactly.
        assert_eq!(cpu_cores(0.1 + 0.2).unwrap(), 0.3);
        assert_eq!(cpu_limit(Some(1.5), 4.0).unwrap(), 4.0);
        assert_eq!(cpu_limit(Some(2.0), 2.0).unwrap(), 2.0);
        assert_eq!(cpu_limit(None, 64.0).unwrap(), 64.0);
        assert_eq!(memory_mib(128).unwrap(), 128);
        assert_eq!(memory_limit_mib(Some(128), 262_144).unwrap(), 262_144);
        assert_eq!(memory_limit_mib(None, 1024).unwrap(), 1024);
    }

    #[test]
    fn a_limit_below_its_request_is_refused_naming_the_request() {
        let e = cpu_limit(Some(4.0), 2.0).unwrap_err();
        assert_eq!(e.rule, "cpu.limit-below-request");
        assert!(e.message.contains("resources.cpu (4)"), "{e}");
        let e = memory_limit_mib(Some(4096), 2048).unwrap_err();
        assert_eq!(e.rule, "memory.limit-below-request");
        assert!(e.message.contains("resources.memory_mb (4096)"), "{e}");
    }

    #[test]
    fn values_outside_modals_bounds_or_finer_than_millicores_are_refused() {
        for bad in [0.0, -1.0, 0.1, 64.5, f64::NAN, f64::INFINITY] {
            assert_eq!(cpu_cores(bad).unwrap_err().rule, "cpu.range", "{bad}");
            assert_eq!(cpu_limit(None, bad).unwrap_err().rule, "cpu.range", "{bad}");
        }
        assert_eq!(cpu_limit(None, 1.0005).unwrap_err().rule, "cpu.precision");
        for bad in [0, 127, -5, 262_145, i64::MAX] {
            assert_eq!(memory_mib(bad).unwrap_err().rule, "memory.range");
            assert_eq!(
                memory_limit_mib(None, bad).unwrap_err().rule,
                "memory.range"
            );
        }
    }
}
