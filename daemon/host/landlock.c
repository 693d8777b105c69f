/*
 * tooljail-landlock: run a program that may read only what it is given (Landlock).
 *
 *   tooljail-landlock [--read-fd N]... [--read PATH]... [--exec PATH]... [--chdir-fd N]
 *                     [--no-sockets] [--keep-cap dac_read_search] [--memory-mb N]
 *                     -- PROGRAM [ARG]...
 *
 * --read-fd N   the directory open on descriptor N (and everything below it) may be read; the
 *               descriptor is closed before PROGRAM starts. The daemon passes a workspace it
 *               holds open, so the rule is on that directory itself, not on a path. Truncating
 *               and device ioctls are allowed there too: whoever works in the workspace may do
 *               both, and a rule that grants every right the kernel asks about on open lets it
 *               stop its walk up the tree at the workspace instead of going on to / for each
 *               file (a tenth of a search's time on a large tree).
 * --read PATH   PATH (a directory and everything below it, or a file) may be read.
 * --exec PATH   PATH may be read and executed (the program, its libraries, the loader).
 * --chdir-fd N  PROGRAM starts in the directory open on descriptor N (closed before it starts).
 * --keep-cap NAME  the one capability PROGRAM keeps when this runs as root (dac_read_search:
 *               read any file, which a search of a user's private project needs, and the
 *               interpreter's files where they are root's alone); without it, none.
 *
 * --memory-mb N  PROGRAM and what it starts may map at most N MiB each (RLIMIT_AS, soft and
 *               hard): a search holds a whole line in memory, and one line of a hostile file can
 *               be a gigabyte (attacker round 141). What it cannot allocate ends it (ripgrep
 *               aborts).
 *
 * Run as root, the wrapper runs PROGRAM as uid and gid 65534, which own nothing, with no
 * capability but the one kept (attacker rounds 138 and 139: as root under Landlock a program
 * could load BPF programs, freeze opens with fanotify, and, as the owner of every root file,
 * chmod a shell setuid).
 * --no-sockets  PROGRAM may make no socket (socket, socketpair, connect and io_uring fail with
 *               EPERM, by a seccomp filter): Landlock does not cover connecting to a Unix socket
 *               by its path (the engine's, the daemon's). Nor may it watch files (inotify,
 *               fanotify), use System V IPC or keys, or change another process's limits or
 *               priority: Landlock covers none of them, and every program run so is one uid.
 *               Nor make or join namespaces (unshare, setns, clone with a namespace flag;
 *               clone3 is "not implemented", so threads start with clone), open files by
 *               handle, reach another process (pidfd, its memory, tracing), or make anonymous
 *               executable files.
 *
 * Everything else the kernel can refuse is refused, for PROGRAM and everything it starts:
 * reading or writing any other file, making, renaming or removing files, TCP (Landlock ABI 4),
 * signals and abstract Unix sockets outside the program (ABI 6). Access is checked when a file is
 * opened, after symbolic links are resolved: a link to outside fails with EACCES.
 *
 * The daemon has threads, so it cannot restrict a child between fork and exec itself; this is
 * the small exec wrapper that does. Exit status 125 and a line on stderr when the confinement
 * cannot be set up (an old kernel, a bad argument): PROGRAM is then never run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif

#define CREATE_RULESET_VERSION (1U << 0)
#define RULE_PATH_BENEATH 1

#define FS_EXECUTE (1ULL << 0)
#define FS_WRITE_FILE (1ULL << 1)
#define FS_READ_FILE (1ULL << 2)
#define FS_READ_DIR (1ULL << 3)
#define FS_REMOVE_DIR (1ULL << 4)
#define FS_REMOVE_FILE (1ULL << 5)
#define FS_MAKE_CHAR (1ULL << 6)
#define FS_MAKE_DIR (1ULL << 7)
#define FS_MAKE_REG (1ULL << 8)
#define FS_MAKE_SOCK (1ULL << 9)
#define FS_MAKE_FIFO (1ULL << 10)
#define FS_MAKE_BLOCK (1ULL << 11)
#define FS_MAKE_SYM (1ULL << 12)
#define FS_REFER (1ULL << 13)     /* ABI 2 */
#define FS_TRUNCATE (1ULL << 14)  /* ABI 3 */
#define FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#define NET_BIND_TCP (1ULL << 0)  /* ABI 4 */
#define NET_CONNECT_TCP (1ULL << 1)
#define SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#define SCOPE_SIGNAL (1ULL << 1)

struct ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

#define FILE_RIGHTS (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV)

static uint64_t handled_fs;

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "tooljail-landlock: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(125);
}

static void add_rule(int ruleset, int fd, uint64_t access, const char *shown) {
    struct stat info;
    if (fstat(fd, &info) != 0)
        fail("cannot inspect", shown);
    /* A file only takes the rights that apply to files. */
    if (!S_ISDIR(info.st_mode))
        access &= FILE_RIGHTS;
    struct path_beneath_attr rule = {.allowed_access = access & handled_fs, .parent_fd = fd};
    if (syscall(__NR_landlock_add_rule, ruleset, RULE_PATH_BENEATH, &rule, 0) != 0)
        fail("the kernel refused a rule for", shown);
}

static void add_path(int ruleset, const char *path, uint64_t access) {
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return; /* not on this machine (e.g. /lib64): nothing to allow */
        fail("cannot open", path);
    }
    add_rule(ruleset, fd, access, path);
    close(fd);
}

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#endif

/* After no_new_privs: every system call of another architecture (and x32's, whose numbers have
   bit 30 set) ends the process; socket, socketpair and connect fail with EPERM, and so do
   io_uring, which makes and connects sockets without them (attacker round 137), inotify and
   fanotify, System V IPC and keys; limits and priorities may be changed for itself only. */
#ifdef NATIVE_ARCH
/* A system call allowed only with these arguments (the caller's own process: pid 0). */
struct own_only {
    uint32_t nr;
    int checks; /* how many of the first arguments must equal `want` */
    uint32_t want[2];
};

static unsigned emit(struct sock_filter *program, unsigned at, struct sock_filter op) {
    program[at] = op;
    return at + 1;
}
#endif

/* The clone flags that make namespaces (CLONE_NEWTIME is clone3's alone: in clone's flags that
   bit is part of the exit signal). */
#define CLONE_NAMESPACES 0x7E020000u

static void forbid_sockets(void) {
#ifndef NATIVE_ARCH
    fail("--no-sockets is not built for this architecture", NULL);
#else
    static const uint32_t refused[] = {
        __NR_socket, __NR_socketpair, __NR_connect,
        __NR_io_uring_setup, __NR_io_uring_enter, __NR_io_uring_register,
        /* Watching what it may not read (with the read-anything capability: any folder's
           names, round 139), or freezing others' opens (round 138). */
#ifdef __NR_inotify_init
        __NR_inotify_init,
#endif
        __NR_inotify_init1, __NR_fanotify_init,
        /* Shared with every other program run so, one uid for all, and outliving them (round
           140): System V IPC and keys. */
        __NR_shmget, __NR_msgget, __NR_semget, __NR_add_key, __NR_request_key, __NR_keyctl,
        /* Round 141's leads, none needed by a search or a parser: new namespaces (a user
           namespace's capabilities), file handles (with the read-anything capability a handle
           opens any inode, whatever its path), another process by pidfd, by its memory or by
           tracing, anonymous executable files, and the kernel's larger surfaces. */
        __NR_unshare, __NR_setns, __NR_name_to_handle_at, __NR_open_by_handle_at,
        __NR_memfd_create, __NR_execveat, __NR_ptrace, __NR_process_vm_readv,
        __NR_process_vm_writev, __NR_perf_event_open, __NR_bpf, __NR_userfaultfd, __NR_kcmp,
#ifdef __NR_pidfd_open
        __NR_pidfd_open, __NR_pidfd_send_signal, __NR_pidfd_getfd,
#endif
    };
    /* Its own limits and priority only: the others run as the same uid (round 140 lowered
       another tenant's search's limits, and PRIO_USER would renice them all). */
    static const struct own_only own[] = {
        {__NR_prlimit64, 1, {0, 0}},
        {__NR_setpriority, 2, {0 /* PRIO_PROCESS */, 0}},
        {__NR_sched_setaffinity, 1, {0, 0}},
        {__NR_sched_setscheduler, 1, {0, 0}},
        {__NR_sched_setparam, 1, {0, 0}},
        {__NR_sched_setattr, 1, {0, 0}},
        {__NR_ioprio_set, 2, {1 /* IOPRIO_WHO_PROCESS */, 0}},
    };
    enum { REFUSED = sizeof(refused) / sizeof(refused[0]), OWN = sizeof(own) / sizeof(own[0]) };
    enum { CLONE_CHECKS = 4 };
    struct sock_filter program[6 + CLONE_CHECKS + REFUSED + OWN * 9 + 3];
    unsigned length = 6 + CLONE_CHECKS + REFUSED + 3;
    for (unsigned k = 0; k < OWN; k++)
        length += 1 + 4 * (unsigned)own[k].checks;
    const unsigned allow = length - 3, deny = length - 2, no_such_call = length - 1;
    unsigned at = 0;
    at = emit(program, at, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                        offsetof(struct seccomp_data, arch)));
    at = emit(program, at, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0));
    at = emit(program, at, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
    at = emit(program, at, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                        offsetof(struct seccomp_data, nr)));
    at = emit(program, at, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1));
    at = emit(program, at, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
    /* A jump's offset counts from the instruction after it. Round 143: clone made the
       namespaces unshare may not; clone3's flags are in memory the filter cannot read, so it
       is "not implemented", and the C library starts threads with clone instead. */
    at = emit(program, at, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 2));
    at = emit(program, at, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                        offsetof(struct seccomp_data, args)));
    at = emit(program, at, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NAMESPACES,
                                                        (uint8_t)(deny - at - 1),
                                                        (uint8_t)(allow - at - 1)));
    at = emit(program, at, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3,
                                                        (uint8_t)(no_such_call - at - 1), 0));
    for (unsigned k = 0; k < REFUSED; k++)
        at = emit(program, at, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refused[k],
                                                            (uint8_t)(deny - at - 1), 0));
    for (unsigned k = 0; k < OWN; k++) {
        unsigned block = 4 * (unsigned)own[k].checks;
        at = emit(program, at, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, own[k].nr,
                                                            0, (uint8_t)block));
        for (int a = 0; a < own[k].checks; a++) {
            uint32_t low = offsetof(struct seccomp_data, args) + 8 * (uint32_t)a;
            int last = a == own[k].checks - 1;
            at = emit(program, at, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, low));
            at = emit(program, at, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                                                                own[k].want[a], 0,
                                                                (uint8_t)(deny - at - 1)));
            at = emit(program, at, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, low + 4));
            at = emit(program, at, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0,
                                                                last ? (uint8_t)(allow - at - 1) : 0,
                                                                (uint8_t)(deny - at - 1)));
        }
    }
    at = emit(program, at, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    at = emit(program, at, (struct sock_filter)BPF_STMT(
                               BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)));
    at = emit(program, at, (struct sock_filter)BPF_STMT(
                               BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)));
    if (at != length)
        fail("the seccomp filter was built wrong", NULL);
    struct sock_fprog filter = {.len = (unsigned short)length, .filter = program};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter, 0, 0) != 0)
        fail("cannot install the seccomp filter", strerror(errno));
#endif
}

/* Who a program this wrapper runs as root becomes: the overflow uid and gid, which own nothing
   (attacker round 139: as uid 0 without capabilities it still owned every root file, so it could
   chmod a shell setuid, and prlimit the daemon to death). */
#define NOBODY 65534

/* As root: every capability but `keep` leaves the bounding set (a root exec gains it) and the
   ambient set, and the program runs as NOBODY, with `keep` alone put back (inheritable and
   ambient, so that the exec keeps it). Not root: nothing to give up, an exec gains nothing. */
static void drop_root(uint64_t keep) {
    if (geteuid() != 0)
        return;
    for (int cap = 0; cap < 64; cap++) {
        if (keep & (1ULL << cap))
            continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
            if (errno == EINVAL)
                break; /* past the last capability this kernel knows */
            fail("cannot drop a capability", strerror(errno));
        }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        fail("cannot clear the ambient capabilities", strerror(errno));
    if (keep && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0)
        fail("cannot keep a capability across the change of identity", strerror(errno));
    if (setgroups(0, NULL) != 0 || setresgid(NOBODY, NOBODY, NOBODY) != 0 ||
        setresuid(NOBODY, NOBODY, NOBODY) != 0)
        fail("cannot give up root", strerror(errno));
    if (getuid() != NOBODY || geteuid() != NOBODY || getgid() != NOBODY)
        fail("still root after giving it up", NULL);
    if (!keep)
        return;
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2] = {{0}};
    data[0].permitted = data[0].effective = data[0].inheritable = (uint32_t)keep;
    data[1].permitted = data[1].effective = data[1].inheritable = (uint32_t)(keep >> 32);
    if (syscall(SYS_capset, &header, data) != 0)
        fail("cannot keep the capability asked for", strerror(errno));
    for (int cap = 0; cap < 64; cap++) {
        if ((keep & (1ULL << cap)) && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0)
            fail("cannot hand the capability asked for to the program", strerror(errno));
    }
}

static long parse_memory(const char *text) {
    char *end = NULL;
    long value = strtol(text, &end, 10);
    if (!*text || *end || value < 16 || value > 1L << 30)
        fail("not a memory size in MiB (16 at least)", text);
    return value;
}

static int parse_fd(const char *text) {
    char *end = NULL;
    long value = strtol(text, &end, 10);
    if (!*text || *end || value < 3 || value > 1 << 20)
        fail("not a descriptor number", text);
    return (int)value;
}

int main(int argc, char **argv) {
    int abi = (int)syscall(__NR_landlock_create_ruleset, NULL, 0, CREATE_RULESET_VERSION);
    if (abi < 1)
        fail("this kernel does not enforce Landlock", strerror(errno));

    handled_fs = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_READ_DIR | FS_REMOVE_DIR |
                 FS_REMOVE_FILE | FS_MAKE_CHAR | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SOCK |
                 FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM;
    if (abi >= 2)
        handled_fs |= FS_REFER;
    if (abi >= 3)
        handled_fs |= FS_TRUNCATE;
    if (abi >= 5)
        handled_fs |= FS_IOCTL_DEV;
    struct ruleset_attr attr = {.handled_access_fs = handled_fs};
    size_t size = sizeof(uint64_t);
    if (abi >= 4) {
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP;
        size = 2 * sizeof(uint64_t);
    }
    if (abi >= 6) {
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL;
        size = sizeof(attr);
    }
    int ruleset = (int)syscall(__NR_landlock_create_ruleset, &attr, size, 0);
    if (ruleset < 0)
        fail("cannot create a Landlock ruleset", strerror(errno));

    const uint64_t read = FS_READ_FILE | FS_READ_DIR;
    int fds[64];
    int nfds = 0;
    int chdir_fd = -1;
    int no_sockets = 0;
    long memory_mb = 0;
    uint64_t keep = 0;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (strcmp(argv[i], "--no-sockets") == 0) {
            no_sockets = 1;
            continue;
        }
        if (i + 1 >= argc)
            fail("missing a value after", argv[i]);
        if (strcmp(argv[i], "--keep-cap") == 0) {
            if (strcmp(argv[++i], "dac_read_search") != 0)
                fail("the one capability that may be kept is dac_read_search, not", argv[i]);
            keep |= 1ULL << CAP_DAC_READ_SEARCH;
        } else if (strcmp(argv[i], "--read-fd") == 0) {
            if (nfds == 64)
                fail("too many descriptors", NULL);
            fds[nfds] = parse_fd(argv[++i]);
            add_rule(ruleset, fds[nfds], read | FS_TRUNCATE | FS_IOCTL_DEV, argv[i]);
            nfds++;
        } else if (strcmp(argv[i], "--memory-mb") == 0) {
            memory_mb = parse_memory(argv[++i]);
        } else if (strcmp(argv[i], "--chdir-fd") == 0) {
            chdir_fd = parse_fd(argv[++i]);
        } else if (strcmp(argv[i], "--read") == 0) {
            add_path(ruleset, argv[++i], read);
        } else if (strcmp(argv[i], "--exec") == 0) {
            add_path(ruleset, argv[++i], read | FS_EXECUTE);
        } else {
            fail("unknown option", argv[i]);
        }
    }
    if (i >= argc)
        fail("no program to run (give it after --)", NULL);

    /* Entered here, after this program started, not by whoever started it: a directory on a
       filesystem that takes its time to answer holds this process, never the daemon. */
    if (chdir_fd >= 0) {
        if (fchdir(chdir_fd) != 0)
            fail("cannot enter the directory", strerror(errno));
        close(chdir_fd);
    }
    if (memory_mb) {
        rlim_t bytes = (rlim_t)memory_mb << 20;
        struct rlimit memory = {.rlim_cur = bytes, .rlim_max = bytes};
        if (setrlimit(RLIMIT_AS, &memory) != 0)
            fail("cannot limit the program's memory", strerror(errno));
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        fail("cannot set no_new_privs", strerror(errno));
    if (syscall(__NR_landlock_restrict_self, ruleset, 0) != 0)
        fail("cannot restrict itself", strerror(errno));
    close(ruleset);
    if (no_sockets)
        forbid_sockets();
    drop_root(keep);
    for (int k = 0; k < nfds; k++)
        close(fds[k]);
    execvp(argv[i], &argv[i]);
    fail("cannot run", argv[i]);
    return 125;
}
