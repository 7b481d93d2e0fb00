# SPDX-License-Identifier: Apache-2.0
"""UCall's benchmark driver: every server pinned to one core and the load generator to
another, each figure measured several times interleaved across servers, medians reported.

    python -m ucallbench [--quick] [--servers a,b] [--workloads x,y] [--reps N]
    python -m ucallbench publish        # copy the last results into docs/ and README.md
    python -m ucallbench binary [--quick]   # the binary payloads section (1.6 MB and 16 KB echoes)

Modules, each importing only those above it:

    config      paths, CPUs, durations, limits
    processes   child processes in their own groups; a server started and stopped
    serving     one server for a stand-alone bench: started, loaded, its CPU per call
    servers     the servers and how to start each one per protocol
    workloads   what each workload sends and expects, and where it runs
    build       building what the servers need, installing the peers
    goals       the speed goals: ratios and bounds
    measure     the load generators, one figure, rounds, paired goal ratios
    report      medians, Markdown tables, the goals table, the chart
    publish     docs/benchmarks.md, the README headline and its chart
    binary      the binary payloads section: echoes beside the floor, grpcio, FastAPI
    cli         the command line

Python 3.11 standard library only; matplotlib, when installed, adds the charts. See
benches/README.md for the method.
"""
