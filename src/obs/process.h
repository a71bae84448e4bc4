/*
 * process.h - the process figures every Prometheus client exports (process_cpu_seconds_total,
 * process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds,
 * process_max_fds), read from the kernel when asked: at scrape time, never per request.
 */
#ifndef ACCELNET_OBS_PROCESS_H
#define ACCELNET_OBS_PROCESS_H

/* User plus system CPU time of the whole process, all threads, in seconds. */
double process_cpu_seconds(void);
/* Resident and virtual memory size in bytes (/proc/self/statm); 0 if unreadable. */
double process_resident_bytes(void);
double process_virtual_bytes(void);
/* Descriptors open now (/proc/self/fd, less the one reading it); 0 if unreadable. */
double process_open_fds(void);
/* The soft RLIMIT_NOFILE; 0 if unknown. */
double process_max_fds(void);

#endif
