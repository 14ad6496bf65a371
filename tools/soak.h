/* soak.h - the soak workload (tools/soak.c) as a function, for tools that
 * run it in-process (the `sefer` tool, tests/reliability). */
#ifndef SEFER_SOAK_H
#define SEFER_SOAK_H

/* Runs the workload with command-line style arguments (argv[0] is the
 * program name; `sefer-soak --help` lists the rest) and returns the exit
 * status the sefer-soak program would have: 0 nothing corrupted (and, with
 * --rss-bound, every repeated phase within the bound), 1 a block was
 * corrupted, an allocation failed or sefer_check found a problem, 2 bad
 * arguments, 3 RSS above the bound.  Prints per-phase lines and a summary
 * on stdout, problems on stderr.  Not reentrant: one run at a time. */
int sefer_soak_main(int argc, char **argv);

#endif /* SEFER_SOAK_H */
