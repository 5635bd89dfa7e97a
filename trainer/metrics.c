// trainer/metrics.c: each device's figures after a step, and the metrics file's JSON lines
// (trainer/metrics.h).
#include "trainer/metrics.h"
#include "core/common.h"
#include "base/paths.h"
#include <errno.h>
#include <unistd.h>

void metrics_device(const Device *dev, const StepResult *r, DevStats *s) {
    memset(s, 0, sizeof *s);
    s->peak_total = dev->peak_total;
    memcpy(s->peak, dev->peak, sizeof s->peak);
    memcpy(s->live, dev->live, sizeof s->live);
    memcpy(s->fwd_peak, r->fwd_peak, sizeof s->fwd_peak);
    for (int k = 0; k < COLL_NKINDS; k++) { s->sent[k] = dev->comm_sent[k]; s->recv[k] = dev->comm_recv[k]; }
    for (int k = 0; k < COLL_NKINDS; k++) { s->net_sent[k] = dev->net_sent[k]; s->net_recv[k] = dev->net_recv[k]; }
    s->host_peak_total = dev->host_peak_total;
    memcpy(s->host_peak, dev->host_peak, sizeof s->host_peak);
    s->to_host = dev->to_host_bytes;
    s->to_device = dev->to_device_bytes;
    s->stop = signals_stop_requested();
}

void metrics_gather(const Mesh *mesh, const Device *dev, const StepResult *r, DevStats *all) {
    Group *g = mesh_group(mesh, mesh_device_id(), MESH_ALL_AXES);
    DevStats mine;
    metrics_device(dev, r, &mine);
    coll_all_gather(g, &mine, all, sizeof mine);
}

size_t metrics_peak(const DevStats *all, int ndev) {
    size_t peak = 0;
    for (int d = 0; d < ndev; d++) peak = MM_MAX(peak, all[d].peak_total);
    return peak;
}

// A fresh run's file, until its first line is written: a temporary beside the path
// (base/paths.h), so that a run failing before it leaves an earlier file as it was.
static FILE *unpublished;

// f renamed over its path if it is that waiting file.
static void publish_if_waiting(FILE *f) {
    if (f != unpublished) return;
    atomic_stream_publish(f);
    unpublished = NULL;
}

// A resumed run appends to the file of the steps before; where there is none yet, its file
// is a fresh one's, so that a resume failing before its first line leaves no empty file.
FILE *metrics_open(const char *path, int first_step) {
    if (first_step == 0 || (access(path, F_OK) != 0 && errno == ENOENT)) return unpublished = atomic_stream_open(path);
    FILE *f = fopen(path, "a");
    if (!f) die("cannot open metrics_file '%s': %s", path, strerror(errno));
    return f;
}

void metrics_close(FILE *f) {
    publish_if_waiting(f);
    fclose(f);
}

// The body of a JSON object of byte counts: "name": bytes, ... (n entries).
static void put_bytes(FILE *f, const char *const *names, const size_t *bytes, int n) {
    for (int i = 0; i < n; i++) fprintf(f, "%s\"%s\": %zu", i ? ", " : "", names[i], bytes[i]);
}

void metrics_write(FILE *f, const char *path, int step, const StepResult *r, StepTime t, const DevStats *all,
                   int ndev) {
    union { float f; uint32_t u; } bits = {r->loss};
    long at = ftell(f);
    fprintf(f, "{\"step\": %d, \"loss\": %.9g, \"loss_bits\": \"0x%08x\", \"ce_loss\": %.9g, \"aux_loss\": %.9g, "
            "\"lr\": %.9g, \"grad_norm\": %.9g, \"ms\": %.3f, \"tokens_per_s\": %.1f, \"gflops\": %.3f, "
            "\"peak_bytes\": %zu, \"peak_bytes_by_tag\": {",
            step, r->loss, bits.u, r->ce_loss, r->aux_loss, r->lr, r->grad_norm, t.ms, t.tok_s, t.gflops,
            metrics_peak(all, ndev));
    put_bytes(f, MEM_TAG_NAMES, all[0].peak, MEM_NTAGS);
    fprintf(f, "}, \"forward_peak_bytes_by_tag\": {");   // device 0's forward passes (not under a pipeline)
    put_bytes(f, MEM_TAG_NAMES, all[0].fwd_peak, MEM_NTAGS);
    fprintf(f, "}, \"devices\": [");
    for (int d = 0; d < ndev; d++) {
        const DevStats *s = &all[d];
        fprintf(f, "%s{\"device\": %d, \"peak_bytes\": %zu, \"peak_bytes_by_tag\": {", d ? ", " : "", d, s->peak_total);
        put_bytes(f, MEM_TAG_NAMES, s->peak, MEM_NTAGS);
        fprintf(f, "}, \"live_bytes_by_tag\": {");
        put_bytes(f, MEM_TAG_NAMES, s->live, MEM_NTAGS);
        fprintf(f, "}, \"comm_bytes_sent\": {");
        put_bytes(f, COLL_NAMES, s->sent, COLL_NKINDS);
        fprintf(f, "}, \"comm_bytes_received\": {");
        put_bytes(f, COLL_NAMES, s->recv, COLL_NKINDS);
        fprintf(f, "}, \"net_bytes_sent\": {");
        put_bytes(f, COLL_NAMES, s->net_sent, COLL_NKINDS);
        fprintf(f, "}, \"net_bytes_received\": {");
        put_bytes(f, COLL_NAMES, s->net_recv, COLL_NKINDS);
        fprintf(f, "}, \"host_peak_bytes\": %zu, \"host_peak_bytes_by_tag\": {", s->host_peak_total);
        put_bytes(f, MEM_TAG_NAMES, s->host_peak, MEM_NTAGS);
        fprintf(f, "}, \"host_transfer_bytes\": {\"to_host\": %zu, \"to_device\": %zu}}", s->to_host, s->to_device);
    }
    fprintf(f, "]}\n");
    if (fflush(f) != 0 || ferror(f)) {
        int err = errno;
        if (at >= 0 && ftruncate(fileno(f), at) != 0) err = errno;
        die("cannot write metrics_file '%s': %s (stopped at step %d; the lines of earlier steps are kept)", path,
            strerror(err), step);
    }
    publish_if_waiting(f);
}
