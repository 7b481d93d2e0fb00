// SPDX-License-Identifier: Apache-2.0
//
// epoll_http: the physical-limit reference for the HTTP benchmarks.
//
// One thread, non-blocking sockets, level-triggered epoll. For every complete
// HTTP request read (head up to "\r\n\r\n", then Content-Length bytes of body
// skipped) it queues one fixed JSON-RPC reply; all replies produced by one
// read go out in one write, so pipelined requests are answered in order.
// Connections are kept alive unless the request says "Connection: close".
//
// Build: cc -O2 -Wall -Wextra -Werror epoll_http.c -o epoll_http
// Usage: epoll_http [PORT]   (0 or none picks a free port)
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
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BODY "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":3}"
#define REPLY                                                                 \
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " \
    "35\r\n\r\n" BODY
_Static_assert(sizeof(BODY) - 1 == 35, "Content-Length must match the body");

enum {
    IN_CAP = 64 * 1024,          // a request head must fit in this
    OUT_HIGH = 1024 * 1024,      // stop reading while this much output is queued
    MAX_EVENTS = 256,
};

struct conn {
    int fd;
    size_t in_len;      // bytes buffered in `in`
    size_t skip;        // body bytes still to discard
    int close_after;    // close once `out` is flushed
    uint32_t events;    // the epoll events registered
    char *out;
    size_t out_len, out_pos, out_cap;
    char in[IN_CAP];
};

static int epfd;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void conn_free(struct conn *c) {
    close(c->fd);  // closing removes it from the epoll set
    free(c->out);
    free(c);
}

static int out_append(struct conn *c, const char *data, size_t len) {
    if (c->out_len + len > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + len) cap *= 2;
        char *p = realloc(c->out, cap);
        if (!p) return -1;
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    return 0;
}

// Case-insensitive check that the header line [p, end) is "name: ..." and,
// if so, a pointer to its value with leading blanks skipped.
static const char *header_value(const char *p, const char *end, const char *name) {
    size_t n = strlen(name);
    if ((size_t)(end - p) <= n || strncasecmp(p, name, n) != 0 || p[n] != ':') return NULL;
    p += n + 1;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

// Looks at one request head [head, head_end); sets the body length and
// whether the client asked to close. Returns -1 for a malformed length.
static int parse_head(const char *head, const char *head_end, size_t *body_len, int *close_req) {
    *body_len = 0;
    *close_req = 0;
    const char *line = memchr(head, '\n', head_end - head);  // skip request line
    while (line && line + 1 < head_end) {
        const char *p = line + 1;
        const char *eol = memchr(p, '\n', head_end - p);
        if (!eol) eol = head_end;
        const char *v;
        if ((v = header_value(p, eol, "content-length"))) {
            size_t n = 0;
            if (v >= eol || *v < '0' || *v > '9') return -1;
            for (; v < eol && *v >= '0' && *v <= '9'; v++) {
                if (n > (SIZE_MAX - 9) / 10) return -1;
                n = n * 10 + (size_t)(*v - '0');
            }
            *body_len = n;
        } else if ((v = header_value(p, eol, "connection"))) {
            if ((size_t)(eol - v) >= 5 && strncasecmp(v, "close", 5) == 0) *close_req = 1;
        }
        line = eol < head_end ? eol : NULL;
    }
    return 0;
}

// Registers the events the connection needs now: input unless output has
// piled up or the connection is closing, output while some is pending.
static void update_events(struct conn *c) {
    size_t pending = c->out_len - c->out_pos;
    uint32_t want = (pending < OUT_HIGH && !c->close_after ? EPOLLIN : 0) | (pending ? EPOLLOUT : 0);
    if (want == c->events) return;
    struct epoll_event ev = {.events = want, .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl");
    c->events = want;
}

// Writes queued output. Returns -1 if the connection must be dropped.
static int flush_out(struct conn *c) {
    while (c->out_pos < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_pos, c->out_len - c->out_pos, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_pos += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            return -1;
        }
    }
    if (c->out_pos == c->out_len) {
        c->out_pos = c->out_len = 0;
        if (c->close_after) return -1;
    }
    update_events(c);
    return 0;
}

// Consumes complete requests from the input buffer. Returns -1 on a bad request.
static int handle_input(struct conn *c) {
    size_t pos = 0;
    while (pos < c->in_len && !c->close_after) {
        if (c->skip) {
            size_t n = c->in_len - pos < c->skip ? c->in_len - pos : c->skip;
            pos += n;
            c->skip -= n;
            continue;
        }
        const char *head = c->in + pos;
        const char *end = memmem(head, c->in_len - pos, "\r\n\r\n", 4);
        if (!end) break;
        end += 4;
        size_t body_len;
        int close_req;
        if (parse_head(head, end, &body_len, &close_req) < 0) return -1;
        if (out_append(c, REPLY, sizeof(REPLY) - 1) < 0) return -1;
        c->skip = body_len;
        c->close_after = close_req;
        pos = (size_t)(end - c->in);
    }
    if (pos > 0) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
    }
    if (c->in_len == IN_CAP) return -1;  // a head larger than the buffer
    return 0;
}

static void on_readable(struct conn *c) {
    while (!c->close_after) {
        size_t space = IN_CAP - c->in_len;
        ssize_t n = recv(c->fd, c->in + c->in_len, space, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            if (handle_input(c) < 0) goto drop;
            // A short read drained the socket; level-triggered epoll reports
            // whatever arrives later.
            if ((size_t)n < space) break;
        } else if (n == 0) {
            goto drop;
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            break;
        } else {
            goto drop;
        }
    }
    if (flush_out(c) < 0) goto drop;
    return;
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
        struct conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->events = EPOLLIN;
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
            if (!c) {
                on_accept(lfd);
            } else if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                on_readable(c);
            } else if (events[i].events & EPOLLOUT) {
                // Re-enables input once the backlog is written.
                if (flush_out(c) < 0) conn_free(c);
            }
        }
    }
}
