//! Processes that never outlive Reins, even after `kill -9`: [`supervise`].
//!
//! A command, a hook or an MCP server runs in its own process group, which Reins kills on every way out it
//! sees (a timeout, a cancellation, a drop, a signal). A `kill -9` of Reins is a way out it cannot see. The
//! kernel's parent-death signal (`PR_SET_PDEATHSIG`) does not cover it: it reaches only the direct child, not
//! the rest of its group (`sh -c 'sleep 300 & sleep 300'` leaves the first `sleep` behind), and it fires when
//! the *thread* that forked ends, not the process (a runtime's short-lived threads would kill healthy
//! commands). So each group gets a **watcher**: a tiny process in the group, forked (never executed) just
//! before the program executes, that waits for two things and then kills its whole group, itself included:
//!
//! - the end of the **lifeline**, a pipe whose only writing end stays open in Reins (close-on-exec, so no
//!   program keeps it): when Reins dies, however it dies, the pipe hangs up;
//! - the end of the program (a pidfd of it): what is left of the group goes with it, as Reins does itself
//!   when it sees the program end.
//!
//! The program stays the direct child of Reins, with its own process id, parent (`$PPID`), environment and
//! exit status; the watcher is not its child (it is forked through a short-lived middle process, so a program
//! that waits for all its children never waits for it) and holds no descriptor but the lifeline's reading end
//! and the pidfd. A descendant that leaves the group on purpose (`setsid`, `setpgid`) is out of reach, as it
//! was before.
//!
//! Everything done after the fork is a plain system call on prepared data: no allocation, no lock, as a
//! child of a multi-threaded process requires.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

/// The lifeline's reading end (the writing end stays open in this process until it ends).
fn lifeline() -> io::Result<RawFd> {
    static LIFELINE: OnceLock<Result<(OwnedFd, OwnedFd), i32>> = OnceLock::new();
    let made = LIFELINE.get_or_init(|| {
        let mut fds = [-1 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given, which has room for two.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE));
        }
        // SAFETY: both descriptors were just created by pipe2 and are owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Neither end may be a standard stream (a process started with one closed gets 0, 1 or 2 here): a
        // child's stdio would replace the reading end, and our own output would go into the writing end.
        Ok((above_stdio(read)?, above_stdio(write)?))
    });
    match made {
        Ok((read, _write)) => Ok(read.as_raw_fd()),
        Err(code) => Err(io::Error::from_raw_os_error(*code)),
    }
}

/// `fd`, moved to a number above the standard streams when it is one of them.
fn above_stdio(fd: OwnedFd) -> Result<OwnedFd, i32> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) makes a new descriptor of an open one; the new one is owned by nobody else.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if moved < 0 {
        return Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE));
    }
    // SAFETY: `moved` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// Gives the process `cmd` starts a watcher that kills its group when this process ends or the program does
/// (see the module's text). Call it on a command put in its own process group (`process_group(0)`); the
/// watcher is forked before the `pre_exec` closures registered after this call run.
pub fn supervise(cmd: &mut tokio::process::Command) -> io::Result<()> {
    let lifeline = lifeline()?;
    // SAFETY: the closure runs in the forked child before exec and makes only async-signal-safe system calls
    // (getpid, pidfd_open, sigaction, fork, waitpid, close, close_range, signal, poll, kill, _exit) on values
    // prepared here or on its own stack; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || start_watcher(lifeline));
    }
    Ok(())
}

/// In the program's process, before it executes: forks the watcher through a middle process that exits at
/// once (so the watcher is nobody's child here), and waits for that middle process.
fn start_watcher(lifeline: RawFd) -> io::Result<()> {
    // SAFETY: plain system calls, in the single-threaded child, on integers and on values on this stack frame.
    unsafe {
        let program = libc::getpid();
        // Close-on-exec: the program's own copy closes when it executes; the watcher keeps its copy.
        let pidfd = libc::syscall(libc::SYS_pidfd_open, program, 0) as RawFd;
        // Reap the middle process here without running a SIGCHLD handler inherited from Reins.
        let mut old: libc::sigaction = std::mem::zeroed();
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGCHLD, &default, &mut old);
        let middle = libc::fork();
        let fork_errno = if middle < 0 { *libc::__errno_location() } else { libc::ECHILD };
        if middle == 0 {
            let watcher = libc::fork();
            if watcher == 0 {
                watch(program, pidfd, lifeline);
            }
            libc::_exit(if watcher < 0 { 1 } else { 0 });
        }
        let mut status = 0;
        let reaped = loop {
            if middle < 0 {
                break -1;
            }
            let r = libc::waitpid(middle, &mut status, 0);
            if r >= 0 || *libc::__errno_location() != libc::EINTR {
                break r;
            }
        };
        libc::sigaction(libc::SIGCHLD, &old, std::ptr::null_mut());
        if pidfd >= 0 {
            libc::close(pidfd);
        }
        if reaped != middle || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            // No watcher: better no program than one that could outlive Reins. (An OS error: nothing is
            // allocated here.)
            return Err(io::Error::from_raw_os_error(fork_errno));
        }
        Ok(())
    }
}

/// The watcher's life: when the lifeline hangs up (Reins is gone) or the program ends, kill the group.
///
/// # Safety
///
/// Only in a forked child that executes nothing.
unsafe fn watch(program: libc::pid_t, pidfd: RawFd, lifeline: RawFd) -> ! {
    // SAFETY: plain system calls on integers and on buffers on this stack frame.
    unsafe {
        // Handlers inherited from Reins have nothing to do here.
        for signal in 1..65 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        close_all_but(lifeline, pidfd);
        loop {
            let mut fds = [
                libc::pollfd { fd: lifeline, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: pidfd, events: libc::POLLIN, revents: 0 },
            ];
            // Without a pidfd (kernels before 5.3) the program is looked at every 100 ms; its id cannot be
            // reused meanwhile, as it names the group this process is in.
            let (count, timeout) = if pidfd >= 0 { (2, -1) } else { (1, 100) };
            let n = libc::poll(fds.as_mut_ptr(), count, timeout);
            if n < 0 && *libc::__errno_location() != libc::EINTR {
                break;
            }
            if n > 0 && fds.iter().take(count as usize).any(|f| f.revents != 0) {
                break;
            }
            if pidfd < 0 && libc::kill(program, 0) != 0 && *libc::__errno_location() == libc::ESRCH {
                break;
            }
        }
        // The whole group, this process included.
        libc::kill(0, libc::SIGKILL);
        libc::_exit(137)
    }
}

/// Closes every descriptor but `a` and `b` (either may be -1).
///
/// # Safety
///
/// Only in a forked child that owns nothing it would miss.
unsafe fn close_all_but(a: RawFd, b: RawFd) {
    let (low, high) = if a <= b { (a, b) } else { (b, a) };
    let mut ok = true;
    let mut from: i64 = 0;
    for keep in [low, high] {
        if keep >= 0 {
            if i64::from(keep) > from {
                // SAFETY: close_range only closes descriptors of this process.
                ok &= unsafe {
                    libc::syscall(libc::SYS_close_range, from as libc::c_uint, (keep - 1) as libc::c_uint, 0u32)
                } == 0;
            }
            from = i64::from(keep) + 1;
        }
    }
    // SAFETY: as above.
    ok &= unsafe { libc::syscall(libc::SYS_close_range, from as libc::c_uint, libc::c_uint::MAX, 0u32) } == 0;
    if !ok {
        // Kernels before 5.9: one by one, up to the limit of open files.
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into the struct it is given; close only closes descriptors of this process.
        unsafe {
            let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                lim.rlim_cur.min(1 << 20) as libc::c_int
            } else {
                4096
            };
            for fd in 0..top {
                if fd != a && fd != b {
                    libc::close(fd);
                }
            }
        }
    }
}
