// SPDX-License-Identifier: Apache-2.0
//
// epoll_echo: the physical-limit reference for the raw TCP benchmarks.
//
// One thread, non-blocking sockets, level-triggered epoll; every byte read is
// written back unchanged. With newline-delimited requests each line comes back
// as its own reply, so this bounds what any raw TCP JSON-RPC server on one
// core can reach (it does no parsing at all). When the peer does not read,
// the unsent bytes are kept and reading pauses until they are written.
//
// Build: cc -O2 -Wall -Wextra -Werror epoll_echo.c -o epoll_echo
// Usage: epoll_echo [PORT]   (0 or none picks a free port)
// Prints "listening on 127.0.0.1:PORT" once bound.

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { BUF_CAP = 64 * 1024, MAX_EVENTS = 256 };

struct conn {
    int fd;
    uint32_t events;   // the epoll events registered
    size_t pos, len;   // buf[pos..len] is read but not yet written back
    char buf[BUF_CAP];
};

static int epfd;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void conn_free(struct conn *c) {
    close(c->fd);  // closing removes it from the epoll set
    free(c);
}

static void set_events(struct conn *c, uint32_t want) {
    if (want == c->events) return;
    struct epoll_event ev = {.events = want, .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl");
    c->events = want;
}

// Writes back what is buffered. Returns -1 if the connection must be dropped.
static int flush_out(struct conn *c) {
    while (c->pos < c->len) {
        ssize_t n = send(c->fd, c->buf + c->pos, c->len - c->pos, MSG_NOSIGNAL);
        if (n > 0) {
            c->pos += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            return -1;
        }
    }
    if (c->pos == c->len) {
        c->pos = c->len = 0;
        set_events(c, EPOLLIN);
    } else {
        set_events(c, EPOLLOUT);  // pause reading until the backlog is written
    }
    return 0;
}

static void on_event(struct conn *c, uint32_t events) {
    if (c->pos < c->len) {
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
        if (flush_out(c) < 0) goto drop;
        return;
    }
    for (;;) {
        ssize_t n = recv(c->fd, c->buf, BUF_CAP, 0);
        if (n > 0) {
            c->pos = 0;
            c->len = (size_t)n;
            if (flush_out(c) < 0) goto drop;
            // Stop on a short read (drained) or while a backlog remains.
            if ((size_t)n < BUF_CAP || c->len) return;
        } else if (n == 0) {
            goto drop;
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return;
        } else {
            goto drop;
        }
    }
drop:
    conn_free(c);
}

static void on_accept(int lfd) {
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            perror("accept4");  // EMFILE and the like: try again on the next event
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = malloc(sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->events = EPOLLIN;
        c->pos = c->len = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
    }
}

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 0;
    if (port < 0 || port > 65535) {
        fprintf(stderr, "usage: %s [PORT]\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0) die("bind");
    if (listen(lfd, 4096) < 0) die("listen");
    socklen_t len = sizeof addr;
    if (getsockname(lfd, (struct sockaddr *)&addr, &len) < 0) die("getsockname");

    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) die("epoll_create1");
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) < 0) die("epoll_ctl");

    printf("listening on 127.0.0.1:%d\n", ntohs(addr.sin_port));
    fflush(stdout);

    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(epfd, events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (c) {
                on_event(c, events[i].events);
            } else {
                on_accept(lfd);
            }
        }
    }
}
