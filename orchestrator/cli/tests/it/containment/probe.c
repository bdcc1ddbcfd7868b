/* The containment suite's probe: one escape attempt (or one thing that must keep
 * working) per run, the same program for every backend. `tests/containment.rs` compiles
 * it with the system C compiler (dynamically linked against glibc, which both the host
 * and the `orch-test:busybox` image have) and runs it through `orch sandbox run`.
 *
 * Exit status: 0 the attempt succeeded ("ESCAPED: ..." for an escape, "ok: ..." for
 * what must work), 1 it failed ("blocked: <op>: <reason>"), 2 usage.
 *
 *   probe tcp HOST PORT        connect and send a line
 *   probe udp HOST PORT        send a datagram
 *   probe raw                  open a raw ICMP socket
 *   probe unix PATH            connect to a Unix stream socket
 *   probe socketpair           a Unix socketpair, one byte through it
 *   probe dns NAME             resolve NAME
 *   probe ptrace PID           attach to PID
 *   probe mount DIR            mount a tmpfs on DIR
 *   probe unshare              new user, mount or network namespace (any counts)
 *   probe setns PID            join PID's mount namespace
 *   probe kill PID             SIGTERM to PID
 *   probe killpg PID           SIGKILL to PID's process group
 *   probe pidfd PID            SIGKILL to PID through a pidfd (pidfd_open, pidfd_send_signal)
 *   probe chain TAG SECS       a fork-and-exit chain for SECS seconds: every process forks
 *                              its successor and exits; each is named "c<TAG>" (its comm,
 *                              kept by a zombie too) so the suite can count them; "links=N"
 *   probe forkbomb [TAG]       fork until fork fails (children pause); "forks=N"
 *   probe memhog MIB [TAG]     allocate and touch 64 MiB at a time; "mib=N" per step
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int blocked(const char *op) {
    printf("blocked: %s: %s\n", op, strerror(errno));
    return 1;
}

static int escaped(const char *what) {
    printf("ESCAPED: %s\n", what);
    return 0;
}

static int inet(int type, const char *host, const char *port) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(port))};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "probe: bad address %s\n", host);
        return 2;
    }
    int fd = socket(AF_INET, type, 0);
    if (fd < 0) return blocked("socket");
    if (type == SOCK_DGRAM) {
        if (sendto(fd, "probe\n", 6, 0, (struct sockaddr *)&addr, sizeof addr) != 6) return blocked("sendto");
        return escaped("datagram sent");
    }
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) return blocked("connect");
    if (write(fd, "probe\n", 6) != 6) return blocked("write");
    return escaped("connected");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) return 2;
    const char *op = argv[1];
    if (!strcmp(op, "tcp") && argc >= 4) return inet(SOCK_STREAM, argv[2], argv[3]);
    if (!strcmp(op, "udp") && argc >= 4) return inet(SOCK_DGRAM, argv[2], argv[3]);
    if (!strcmp(op, "raw")) {
        int fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
        return fd < 0 ? blocked("socket") : escaped("raw socket");
    }
    if (!strcmp(op, "unix") && argc >= 3) {
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        strncpy(addr.sun_path, argv[2], sizeof addr.sun_path - 1);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0) return blocked("socket");
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) return blocked("connect");
        return escaped("connected");
    }
    if (!strcmp(op, "socketpair")) {
        int sv[2];
        char c = 0;
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return blocked("socketpair");
        if (write(sv[0], "x", 1) != 1 || read(sv[1], &c, 1) != 1 || c != 'x') return blocked("socketpair io");
        printf("ok: socketpair\n");
        return 0;
    }
    if (!strcmp(op, "dns") && argc >= 3) {
        struct addrinfo *res = NULL;
        int rc = getaddrinfo(argv[2], "80", NULL, &res);
        if (rc != 0) {
            printf("blocked: getaddrinfo: %s\n", gai_strerror(rc));
            return 1;
        }
        return escaped("resolved");
    }
    if (!strcmp(op, "ptrace") && argc >= 3) {
        pid_t pid = atoi(argv[2]);
        if (ptrace(PTRACE_ATTACH, pid, 0, 0) != 0) return blocked("ptrace");
        ptrace(PTRACE_DETACH, pid, 0, 0);
        return escaped("attached");
    }
    if (!strcmp(op, "mount") && argc >= 3) {
        if (mount("probe", argv[2], "tmpfs", 0, "") != 0) return blocked("mount");
        umount(argv[2]);
        return escaped("mounted");
    }
    if (!strcmp(op, "unshare")) {
        int flags[] = {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET};
        const char *names[] = {"user", "mount", "net"};
        for (int i = 0; i < 3; i++) {
            if (unshare(flags[i]) == 0) return escaped(names[i]);
            printf("blocked: unshare %s: %s\n", names[i], strerror(errno));
        }
        return 1;
    }
    if (!strcmp(op, "setns") && argc >= 3) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%s/ns/mnt", argv[2]);
        int fd = open(path, O_RDONLY);
        if (fd < 0) return blocked("open ns");
        if (setns(fd, 0) != 0) return blocked("setns");
        return escaped("joined");
    }
    if (!strcmp(op, "kill") && argc >= 3) {
        if (kill(atoi(argv[2]), SIGTERM) != 0) return blocked("kill");
        return escaped("signalled");
    }
    if (!strcmp(op, "killpg") && argc >= 3) {
        pid_t group = getpgid(atoi(argv[2]));
        if (group < 0) return blocked("getpgid");
        if (kill(-group, SIGKILL) != 0) return blocked("killpg");
        return escaped("signalled the group");
    }
    if (!strcmp(op, "pidfd") && argc >= 3) {
        int fd = (int)syscall(SYS_pidfd_open, atoi(argv[2]), 0);
        if (fd < 0) return blocked("pidfd_open");
        if (syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) != 0) return blocked("pidfd_send_signal");
        return escaped("signalled through a pidfd");
    }
    if (!strcmp(op, "chain") && argc >= 4) {
        char name[16];
        snprintf(name, sizeof name, "c%s", argv[2]);
        prctl(PR_SET_NAME, name);
        time_t end = time(NULL) + atoi(argv[3]);
        long links = 0;
        while (time(NULL) < end) {
            pid_t pid = fork();
            if (pid < 0) {
                usleep(1000);
                continue;
            }
            if (pid > 0) _exit(0);
            links++;
        }
        printf("links=%ld\n", links);
        return 0;
    }
    if (!strcmp(op, "forkbomb")) {
        const int most = 20000;
        int n = 0;
        for (; n < most; n++) {
            pid_t pid = fork();
            if (pid < 0) {
                printf("forks=%d\n", n);
                return blocked("fork");
            }
            if (pid == 0) {
                pause();
                _exit(0);
            }
        }
        printf("forks=%d\n", n);
        return escaped("no process limit");
    }
    if (!strcmp(op, "memhog") && argc >= 3) {
        long most = atol(argv[2]);
        long mib = 0;
        for (; mib < most; mib += 64) {
            char *chunk = malloc(64L << 20);
            if (!chunk) return blocked("malloc");
            memset(chunk, 1, 64L << 20);
            printf("mib=%ld\n", mib + 64);
        }
        return escaped("no memory limit");
    }
    fprintf(stderr, "probe: unknown or incomplete op %s\n", op);
    return 2;
}
