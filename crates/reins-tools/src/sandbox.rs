//! The OS sandbox for commands (Linux): Landlock, seccomp, and namespaces.
//!
//! - **Landlock**: the filesystem is readable and executable everywhere, writable only beneath the workspace, the
//!   command's private temporary directory and `/dev/null`; with ABI 4+ and no network, TCP bind/connect are
//!   denied; with ABI 6+, signals and abstract UNIX sockets are scoped to the sandbox. Landlock also forbids the
//!   sandboxed process to change its mount topology.
//! - **Namespaces** (where the host allows them): a fresh user namespace (the caller's uid/gid mapped to
//!   themselves), mount namespace, IPC namespace, and — without network — a network namespace with only an
//!   unconfigured loopback. In the mount namespace every protected path that exists (e.g. `.git`) is
//!   bind-mounted read-only, which is how protected paths stay read-only while the rest of the workspace is
//!   writable. (No PID namespace: the executed program itself cannot enter one without an extra init process.)
//!   A protected path that does not exist yet cannot be mounted over, and Landlock has no deny rules, so the
//!   command runner ([`crate::command`]) scans for protected paths before and after each command and removes
//!   any the command created, reporting the call as an error.
//! - **seccomp**: denies `ptrace`, `process_vm_readv/writev`, `io_uring_*`, every mount-changing call, and —
//!   without network — `socket` for every family but `AF_UNIX`.
//!
//! [`probe`] reports what the host supports. [`prepare`] fails closed in [`SandboxMode::Required`]: if a layer
//! the request needs is missing, it refuses with [`SandboxError::Unavailable`] instead of running with less.
//! [`SandboxMode::BestEffort`] applies what the host has. Everything is built in the parent; the child only
//! makes system calls on prepared data ([`PreparedSandbox::enter`]).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::workspace::{PROTECTED_SCAN_LIMIT, ProtectedScan, Workspace};

/// How much isolation a command must get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// No sandbox (process group, environment scrubbing and limits still apply).
    Off,
    /// Every layer the request needs, or refuse to run (fail closed).
    #[default]
    Required,
    /// Whatever the host supports; the caller accepts weaker isolation.
    BestEffort,
}

/// What the host supports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SandboxSupport {
    /// The kernel release.
    pub kernel: String,
    /// The Landlock ABI version, if Landlock is enabled.
    pub landlock_abi: Option<i32>,
    /// seccomp filters.
    pub seccomp: bool,
    /// Unprivileged-style user namespaces (unshare with CLONE_NEWUSER works).
    pub user_namespaces: bool,
    /// Mount, IPC and network namespaces (through a user namespace, or directly as root).
    pub namespaces: bool,
    /// The active LSMs, when securityfs shows them.
    pub lsm: Option<String>,
}

impl SandboxSupport {
    /// A human report, one fact a line.
    pub fn render(&self) -> String {
        let yn = |b: bool| if b { "yes" } else { "no" };
        format!(
            "kernel: {}\nlandlock: {}\nseccomp: {}\nuser namespaces: {}\nmount/ipc/net namespaces: {}\nlsm: {}\n\
             required sandbox available: {}\n",
            self.kernel,
            match self.landlock_abi {
                Some(v) => format!("yes (ABI {v})"),
                None => "no".into(),
            },
            yn(self.seccomp),
            yn(self.user_namespaces),
            yn(self.namespaces),
            self.lsm.clone().unwrap_or_else(|| "unknown (securityfs not mounted)".into()),
            yn(self.landlock_abi.is_some() && self.seccomp),
        )
    }
}

/// Why a sandbox could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The host cannot give the isolation asked for; the command was not run.
    #[error(
        "sandbox unavailable: {0}; the command was not run (accept weaker isolation with best-effort mode \
         / --accept-weaker-sandbox, or turn the sandbox off with --no-sandbox)"
    )]
    Unavailable(String),
    /// Building the sandbox failed.
    #[error("sandbox setup failed: {0}")]
    Setup(String),
}

/// What a command's sandbox must allow.
#[derive(Clone, Debug)]
pub struct SandboxRequest {
    /// The workspace (writable except for its protected paths).
    pub workspace: Arc<Workspace>,
    /// Other writable directories (the command's private temporary directory).
    pub writable: Vec<PathBuf>,
    /// Whether the network is allowed.
    pub network: bool,
}

/// A sandbox built in the parent, entered by the child just before it executes.
pub struct PreparedSandbox {
    ruleset: Option<landlock::RulesetCreated>,
    seccomp: Option<seccompiler::BpfProgram>,
    unshare: libc::c_int,
    id_maps: Vec<(CString, Vec<u8>)>,
    read_only: Vec<(CString, libc::c_ulong)>,
    summary: String,
}

impl std::fmt::Debug for PreparedSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedSandbox").field("summary", &self.summary).finish()
    }
}

/// What the host supports (probed once per process).
pub fn probe() -> &'static SandboxSupport {
    static SUPPORT: OnceLock<SandboxSupport> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned();
        let lsm = std::fs::read_to_string("/sys/kernel/security/lsm").ok().map(|s| s.trim().to_owned());
        let seccomp = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.contains("Seccomp_filters:"));
        let user_namespaces = try_in_child(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWNET);
        let namespaces =
            user_namespaces || (is_root() && try_in_child(libc::CLONE_NEWNS | libc::CLONE_NEWNET | libc::CLONE_NEWIPC));
        SandboxSupport { kernel, landlock_abi: landlock_abi(), seccomp, user_namespaces, namespaces, lsm }
    })
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn landlock_abi() -> Option<i32> {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only queries the ABI version; it
    // reads no memory and creates no descriptor.
    let v = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<libc::c_void>(), 0usize, 1u32) };
    (v > 0).then_some(v as i32)
}

/// Forks a child that tries `unshare(flags)` and reports whether it worked.
fn try_in_child(flags: libc::c_int) -> bool {
    // SAFETY: the child calls only async-signal-safe functions (unshare, _exit) before exiting, so forking a
    // multi-threaded process is sound; the parent reaps it with waitpid.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return false;
        }
        if pid == 0 {
            let ok = libc::unshare(flags) == 0;
            libc::_exit(if ok { 0 } else { 1 });
        }
        let mut status = 0;
        loop {
            let r = libc::waitpid(pid, &mut status, 0);
            if r == pid {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                return false;
            }
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

fn cstring(p: &std::path::Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| SandboxError::Setup("a path contains NUL".into()))
}

/// The host paths of the protected entries in `scan`.
fn host_paths(ws: &Workspace, scan: &ProtectedScan) -> Vec<PathBuf> {
    scan.paths.iter().map(|p| ws.host_root().join(std::ffi::OsStr::from_bytes(p))).collect()
}

fn mount_flags(path: &std::path::Path) -> libc::c_ulong {
    use rustix::fs::StatVfsMountFlags as F;
    let Ok(st) = rustix::fs::statvfs(path) else { return 0 };
    let mut flags = 0;
    for (f, m) in [
        (F::NOSUID, libc::MS_NOSUID),
        (F::NODEV, libc::MS_NODEV),
        (F::NOEXEC, libc::MS_NOEXEC),
        (F::NOATIME, libc::MS_NOATIME),
        (F::NODIRATIME, libc::MS_NODIRATIME),
        (F::RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag.contains(f) {
            flags |= m;
        }
    }
    flags
}

/// Builds the sandbox for `req` in `mode` (not [`SandboxMode::Off`]). In `Required` mode, refuses when the host
/// lacks a layer the request needs.
pub fn prepare(req: &SandboxRequest, mode: SandboxMode) -> Result<PreparedSandbox, SandboxError> {
    prepare_with(req, mode, probe())
}

/// [`prepare`] against a given host description (for tests of the fail-closed decision).
pub fn prepare_with(
    req: &SandboxRequest,
    mode: SandboxMode,
    support: &SandboxSupport,
) -> Result<PreparedSandbox, SandboxError> {
    let scan = req.workspace.protected_scan(PROTECTED_SCAN_LIMIT);
    prepare_scanned(req, mode, support, &scan)
}

/// [`prepare_with`] over a protected-path scan the caller already made (the command runner compares it with
/// the scan after the command).
pub(crate) fn prepare_scanned(
    req: &SandboxRequest,
    mode: SandboxMode,
    support: &SandboxSupport,
    scan: &ProtectedScan,
) -> Result<PreparedSandbox, SandboxError> {
    let required = mode == SandboxMode::Required;
    let protected = host_paths(&req.workspace, scan);
    let mut missing: Vec<String> = Vec::new();
    if support.landlock_abi.is_none() {
        missing.push("Landlock is not enabled in this kernel (filesystem confinement)".into());
    }
    if !support.seccomp {
        missing.push("seccomp filters are not supported (syscall and network filtering)".into());
    }
    if !protected.is_empty() && !support.namespaces {
        missing.push("mount namespaces are not available (protected paths would be writable)".into());
    }
    if required && !missing.is_empty() {
        return Err(SandboxError::Unavailable(missing.join("; ")));
    }
    let mut layers: Vec<String> = Vec::new();

    let ruleset = match support.landlock_abi {
        Some(abi) => {
            let r = build_ruleset(req, abi).map_err(|e| SandboxError::Setup(format!("landlock: {e}")))?;
            layers.push(format!("landlock(abi {abi})"));
            Some(r)
        }
        None => None,
    };
    let seccomp = if support.seccomp {
        layers.push(if req.network { "seccomp".into() } else { "seccomp(no-inet)".into() });
        Some(build_seccomp(req.network)?)
    } else {
        None
    };
    let mut unshare = 0;
    let mut id_maps = Vec::new();
    let mut read_only = Vec::new();
    if support.namespaces {
        unshare = libc::CLONE_NEWNS | libc::CLONE_NEWIPC;
        if !req.network {
            unshare |= libc::CLONE_NEWNET;
        }
        if support.user_namespaces {
            unshare |= libc::CLONE_NEWUSER;
            let uid = rustix::process::geteuid().as_raw();
            let gid = rustix::process::getegid().as_raw();
            let c = |s: &str| CString::new(s).map_err(|_| SandboxError::Setup("bad map path".into()));
            id_maps.push((c("/proc/self/setgroups")?, b"deny".to_vec()));
            id_maps.push((c("/proc/self/uid_map")?, format!("{uid} {uid} 1\n").into_bytes()));
            id_maps.push((c("/proc/self/gid_map")?, format!("{gid} {gid} 1\n").into_bytes()));
        }
        for p in &protected {
            read_only.push((cstring(p)?, mount_flags(p)));
        }
        layers.push(format!(
            "namespaces({}mount,ipc{})",
            if support.user_namespaces { "user," } else { "" },
            if req.network { "" } else { ",net" }
        ));
        if !protected.is_empty() {
            layers.push(format!("read-only protected paths: {}", protected.len()));
        }
        if !scan.complete {
            layers.push(format!("protected-path scan stopped after {} entries", scan.entries));
        }
    }
    if !missing.is_empty() {
        layers.push(format!("WEAKER: {}", missing.join("; ")));
    }
    Ok(PreparedSandbox { ruleset, seccomp, unshare, id_maps, read_only, summary: layers.join(", ") })
}

fn build_ruleset(req: &SandboxRequest, abi_version: i32) -> Result<landlock::RulesetCreated, landlock::RulesetError> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope, path_beneath_rules,
    };
    let abi = ABI::from(abi_version);
    let mut ruleset =
        Ruleset::default().set_compatibility(CompatLevel::BestEffort).handle_access(AccessFs::from_all(abi))?;
    if !req.network && abi_version >= 4 {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    if abi_version >= 6 {
        ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal)?;
    }
    // The workspace rule is tied to the root's own handle, not to its name.
    ruleset
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
        .add_rule(PathBeneath::new(req.workspace.root_fd(), AccessFs::from_all(abi)))?
        .add_rules(path_beneath_rules(&req.writable, AccessFs::from_all(abi)))?
        .add_rules(path_beneath_rules(["/dev/null"], AccessFs::from_file(abi)))
}

fn build_seccomp(network: bool) -> Result<seccompiler::BpfProgram, SandboxError> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
    };
    let err = |e: seccompiler::BackendError| SandboxError::Setup(format!("seccomp: {e}"));
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for sys in [
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_fsconfig,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
    ] {
        rules.insert(sys, Vec::new());
    }
    if !network {
        let not_unix =
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, libc::AF_UNIX as u64).map_err(err)?;
        rules.insert(libc::SYS_socket, vec![SeccompRule::new(vec![not_unix]).map_err(err)?]);
    }
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| SandboxError::Setup(format!("seccomp: unsupported architecture {}", std::env::consts::ARCH)))?;
    let filter =
        SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch).map_err(err)?;
    filter.try_into().map_err(|e: seccompiler::BackendError| err(e))
}

impl PreparedSandbox {
    /// What isolation applies, for the result and logs.
    pub fn summary(&self) -> String {
        self.summary.clone()
    }

    /// Enters the sandbox. Runs in the forked child before exec: system calls on prepared data only.
    pub(crate) fn enter(&mut self) -> std::io::Result<()> {
        let last = std::io::Error::last_os_error;
        if self.unshare != 0 {
            // SAFETY: unshare takes flags only.
            if unsafe { libc::unshare(self.unshare) } != 0 {
                return Err(last());
            }
        }
        for (path, content) in &self.id_maps {
            // SAFETY: `path` is a valid NUL-terminated string and `content` a valid buffer, both owned by `self`
            // and alive for the calls; the descriptor is closed before leaving the block.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(last());
                }
                let n = libc::write(fd, content.as_ptr().cast(), content.len());
                libc::close(fd);
                if n < 0 {
                    return Err(last());
                }
            }
        }
        if self.unshare & libc::CLONE_NEWNS != 0 {
            let root = c"/";
            // SAFETY: all pointers are valid NUL-terminated strings owned by `self` (or static) or null where the
            // call allows it; mount only changes this child's private mount namespace.
            unsafe {
                if libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(last());
                }
                for (path, flags) in &self.read_only {
                    if libc::mount(
                        path.as_ptr(),
                        path.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ) != 0
                    {
                        return Err(last());
                    }
                    let remount = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | flags;
                    if libc::mount(std::ptr::null(), path.as_ptr(), std::ptr::null(), remount, std::ptr::null()) != 0 {
                        return Err(last());
                    }
                }
            }
        }
        if let Some(ruleset) = self.ruleset.take() {
            ruleset.restrict_self().map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))?;
        }
        if let Some(prog) = &self.seccomp {
            seccompiler::apply_filter(prog).map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))?;
        }
        Ok(())
    }
}
