/* C-Raft messages <-> proto/raft.proto (protobuf-c). See raft_host.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <raft.h>

#include "cluster/raft/raft_host.h"
#include "proto/raft.pb-c.h"
#include "storage/base/arena_pb.h"
#include "storage/base/buf.h"

struct raft_msg_decoded {
    /* The unpacked message lives in `scratch`: protobuf-c allocates every submessage,
     * entry and payload of it apart, and a message of one entry made some ten malloc and
     * free calls (a follower decodes one or two per write). Freed at once with it. */
    arena scratch;
    Strata__Raft__RaftMessage *pb;
    struct raft_entry *entries;
    void *batch;      /* raft_malloc'd token every entry's `batch` points to (see below) */
    char address[24]; /* the sender's address as C-Raft sees it: its id in decimal */
    struct raft_configuration conf; /* InstallSnapshot: built with C-Raft's allocator */
    bool conf_owned;                /* conf is still ours to close */
    bool is_check;                  /* a leadership check of the host's, in `check` */
    raft_host_check check;
};

/* InstallSnapshot: the configuration as repeated RaftServer. */
static int encode_conf(const struct raft_configuration *c, Strata__Raft__RaftServer **ps,
                       Strata__Raft__RaftServer ***pp, strata_err *err)
{
    *ps = calloc(c->n ? c->n : 1, sizeof **ps);
    *pp = calloc(c->n ? c->n : 1, sizeof **pp);
    if (*ps == NULL || *pp == NULL) {
        free(*ps);
        free(*pp);
        *ps = NULL;
        *pp = NULL;
        return strata_err_set(err, ERR_NOMEM, "raft message encode");
    }
    for (unsigned i = 0; i < c->n; i++) {
        strata__raft__raft_server__init(&(*ps)[i]);
        (*ps)[i].id = c->servers[i].id;
        (*ps)[i].address = c->servers[i].address != NULL ? c->servers[i].address : "";
        (*ps)[i].role = (uint32_t)c->servers[i].role;
        (*pp)[i] = &(*ps)[i];
    }
    return 0;
}

/* *out (malloc'd) = pb packed. */
static int pack(const Strata__Raft__RaftMessage *pb, uint8_t **out, size_t *out_len,
                strata_err *err)
{
    size_t len = strata__raft__raft_message__get_packed_size(pb);
    uint8_t *bytes = malloc(len > 0 ? len : 1);
    if (bytes == NULL)
        return strata_err_set(err, ERR_NOMEM, "raft message encode");
    strata__raft__raft_message__pack(pb, bytes);
    *out = bytes;
    *out_len = len;
    return 0;
}

int raft_msg_encode(uint64_t group, uint64_t from, const struct raft_message *m,
                    const raft_host_entry *entries, uint8_t **out, size_t *out_len, strata_err *err)
{
    Strata__Raft__RaftMessage pb = STRATA__RAFT__RAFT_MESSAGE__INIT;
    Strata__Raft__RaftAppendEntries ae = STRATA__RAFT__RAFT_APPEND_ENTRIES__INIT;
    Strata__Raft__RaftAppendEntriesResult aer = STRATA__RAFT__RAFT_APPEND_ENTRIES_RESULT__INIT;
    Strata__Raft__RaftRequestVote rv = STRATA__RAFT__RAFT_REQUEST_VOTE__INIT;
    Strata__Raft__RaftRequestVoteResult rvr = STRATA__RAFT__RAFT_REQUEST_VOTE_RESULT__INIT;
    Strata__Raft__RaftTimeoutNow tn = STRATA__RAFT__RAFT_TIMEOUT_NOW__INIT;
    Strata__Raft__RaftInstallSnapshot is = STRATA__RAFT__RAFT_INSTALL_SNAPSHOT__INIT;
    Strata__Raft__RaftEntry *pe = NULL;
    Strata__Raft__RaftEntry **pp = NULL;
    Strata__Raft__RaftServer *ps = NULL;
    Strata__Raft__RaftServer **psp = NULL;

    pb.group_id = group;
    pb.from_id = from;
    switch (m->type) {
    case RAFT_APPEND_ENTRIES: {
        const struct raft_append_entries *a = &m->append_entries;
        pb.version = a->version;
        ae.term = a->term;
        ae.prev_log_index = a->prev_log_index;
        ae.prev_log_term = a->prev_log_term;
        ae.leader_commit = a->leader_commit;
        if (a->n_entries > 0) {
            if (entries == NULL)
                return strata_err_set(err, ERR_INTERNAL, "append entries without payloads");
            pe = calloc(a->n_entries, sizeof *pe);
            pp = calloc(a->n_entries, sizeof *pp);
            if (pe == NULL || pp == NULL) {
                free(pe);
                free(pp);
                return strata_err_set(err, ERR_NOMEM, "raft message encode");
            }
            for (unsigned i = 0; i < a->n_entries; i++) {
                strata__raft__raft_entry__init(&pe[i]);
                pe[i].term = entries[i].term;
                pe[i].type = entries[i].type;
                pe[i].data.data = (uint8_t *)entries[i].data;
                pe[i].data.len = entries[i].len;
                pp[i] = &pe[i];
            }
            ae.n_entries = a->n_entries;
            ae.entries = pp;
        }
        pb.body_case = STRATA__RAFT__RAFT_MESSAGE__BODY_APPEND_ENTRIES;
        pb.append_entries = &ae;
        break;
    }
    case RAFT_APPEND_ENTRIES_RESULT: {
        const struct raft_append_entries_result *a = &m->append_entries_result;
        pb.version = a->version;
        aer.term = a->term;
        aer.rejected = a->rejected;
        aer.last_log_index = a->last_log_index;
        aer.features = a->features;
        aer.capacity = a->capacity;
        pb.body_case = STRATA__RAFT__RAFT_MESSAGE__BODY_APPEND_ENTRIES_RESULT;
        pb.append_entries_result = &aer;
        break;
    }
    case RAFT_REQUEST_VOTE: {
        const struct raft_request_vote *a = &m->request_vote;
        pb.version = a->version;
        rv.term = a->term;
        rv.candidate_id = a->candidate_id;
        rv.last_log_index = a->last_log_index;
        rv.last_log_term = a->last_log_term;
        rv.disrupt_leader = a->disrupt_leader;
        rv.pre_vote = a->pre_vote;
        pb.body_case = STRATA__RAFT__RAFT_MESSAGE__BODY_REQUEST_VOTE;
        pb.request_vote = &rv;
        break;
    }
    case RAFT_REQUEST_VOTE_RESULT: {
        const struct raft_request_vote_result *a = &m->request_vote_result;
        pb.version = a->version;
        rvr.term = a->term;
        rvr.vote_granted = a->vote_granted;
        rvr.pre_vote = a->pre_vote;
        rvr.features = a->features;
        rvr.capacity = a->capacity;
        pb.body_case = STRATA__RAFT__RAFT_MESSAGE__BODY_REQUEST_VOTE_RESULT;
        pb.request_vote_result = &rvr;
        break;
    }
    case RAFT_TIMEOUT_NOW: {
        const struct raft_timeout_now *a = &m->timeout_now;
        pb.version = a->version;
        tn.term = a->term;
        tn.last_log_index = a->last_log_index;
        tn.last_log_term = a->last_log_term;
        pb.body_case = STRATA__RAFT__RAFT_MESSAGE__BODY_TIMEOUT_NOW;
        pb.timeout_now = &tn;
        break;
    }
    case RAFT_INSTALL_SNAPSHOT: {
        /* Metadata only: the snapshot's data moves out of band (see raft_host.h). */
        const struct raft_install_snapshot *a = &m->install_snapshot;
        if (a->data.len != 0)
            return strata_err_set(err, ERR_VALIDATION, "install snapshot carries no data");
        if (encode_conf(&a->conf, &ps, &psp, err) != 0)
            return -1;
        pb.version = a->version;
        is.term = a->term;
        is.last_index = a->last_index;
        is.last_term = a->last_term;
        is.conf_index = a->conf_index;
        is.n_conf = a->conf.n;
        is.conf = psp;
        pb.body_case = STRATA__RAFT__RAFT_MESSAGE__BODY_INSTALL_SNAPSHOT;
        pb.install_snapshot = &is;
        break;
    }
    default:
        return strata_err_set(err, ERR_VALIDATION, "raft message type %d not supported",
                              (int)m->type);
    }

    int rc = pack(&pb, out, out_len, err);
    free(pe);
    free(pp);
    free(ps);
    free(psp);
    return rc;
}

int raft_msg_encode_check(uint64_t group, uint64_t from, const raft_host_check *c, uint8_t **out,
                          size_t *out_len, strata_err *err)
{
    Strata__Raft__RaftMessage pb = STRATA__RAFT__RAFT_MESSAGE__INIT;
    Strata__Raft__RaftLeaderCheck lc = STRATA__RAFT__RAFT_LEADER_CHECK__INIT;
    Strata__Raft__RaftLeaderCheckResult lcr = STRATA__RAFT__RAFT_LEADER_CHECK_RESULT__INIT;
    pb.group_id = group;
    pb.from_id = from;
    if (c->result) {
        lcr.term = c->term;
        lcr.seq = c->seq;
        lcr.ok = c->ok;
        pb.body_case = STRATA__RAFT__RAFT_MESSAGE__BODY_LEADER_CHECK_RESULT;
        pb.leader_check_result = &lcr;
    } else {
        lc.term = c->term;
        lc.seq = c->seq;
        pb.body_case = STRATA__RAFT__RAFT_MESSAGE__BODY_LEADER_CHECK;
        pb.leader_check = &lc;
    }
    return pack(&pb, out, out_len, err);
}

static int bad(strata_err *err, const char *what)
{
    return strata_err_set(err, ERR_CORRUPT, "malformed raft message: %s", what);
}

static bool valid_configuration(const uint8_t *data, size_t len)
{
    struct raft_configuration conf;
    if (len == 0 || len > 1 << 20)
        return false;
    /* C-Raft's decoder runs strlen() over addresses without a bound: give it a copy with
     * zero padding, so a missing terminator ends inside our buffer. */
    uint8_t *copy = calloc(1, len + 64);
    if (copy == NULL)
        return false;
    memcpy(copy, data, len);
    struct raft_buffer b = {copy, len};
    raft_configuration_init(&conf);
    int rv = raft_configuration_decode(&b, &conf);
    free(copy);
    if (rv != 0)
        return false; /* the decoder already released what it had built */
    bool ok = conf.n > 0;
    for (unsigned i = 0; ok && i < conf.n; i++)
        ok = conf.servers[i].id != 0 && conf.servers[i].address != NULL &&
             conf.servers[i].role >= RAFT_STANDBY && conf.servers[i].role <= RAFT_SPARE;
    raft_configuration_close(&conf);
    return ok;
}

/* The configuration of an InstallSnapshot, rebuilt with C-Raft's allocator (the core
 * takes it over). Addresses are the ids in decimal, as everywhere in the host. */
static int decode_conf(raft_msg_decoded *d, const Strata__Raft__RaftInstallSnapshot *a,
                       strata_err *err)
{
    raft_configuration_init(&d->conf);
    d->conf_owned = true;
    if (a->n_conf == 0 || a->n_conf > 1024)
        return bad(err, "snapshot configuration size");
    for (size_t i = 0; i < a->n_conf; i++) {
        const Strata__Raft__RaftServer *sv = a->conf[i];
        char addr[24];
        if (sv->id == 0 || sv->role > RAFT_SPARE)
            return bad(err, "snapshot configuration server");
        snprintf(addr, sizeof addr, "%" PRIu64, sv->id);
        int rv = raft_configuration_add(&d->conf, sv->id, addr, (int)sv->role);
        if (rv == RAFT_NOMEM)
            return strata_err_set(err, ERR_NOMEM, "raft message decode");
        if (rv != 0)
            return bad(err, "snapshot configuration server");
    }
    return 0;
}

static int decode_install_snapshot(raft_msg_decoded *d, const Strata__Raft__RaftInstallSnapshot *a,
                                   unsigned char version, struct raft_message *out, strata_err *err)
{
    struct raft_install_snapshot *m = &out->install_snapshot;
    out->type = RAFT_INSTALL_SNAPSHOT;
    /* C-Raft asserts on these; data never travels in the message (out of band). */
    if (a->term == 0 || a->last_index == 0 || a->last_term == 0 || a->last_term > a->term ||
        a->conf_index == 0 || a->conf_index > a->last_index || a->data.len != 0)
        return bad(err, "install snapshot header");
    if (decode_conf(d, a, err) != 0)
        return -1;
    m->version = version;
    m->term = a->term;
    m->last_index = a->last_index;
    m->last_term = a->last_term;
    m->conf_index = a->conf_index;
    m->conf = d->conf;
    m->data.base = NULL;
    m->data.len = 0;
    return 0;
}

int raft_msg_decode(const void *bytes, size_t len, uint64_t *group, uint64_t *from,
                    struct raft_message *out, raft_msg_decoded **owner, strata_err *err)
{
    raft_msg_decoded *d = calloc(1, sizeof *d);
    if (d == NULL)
        return strata_err_set(err, ERR_NOMEM, "raft message decode");
    arena_init(&d->scratch, 0);
    ProtobufCAllocator alloc = arena_pb_allocator(&d->scratch);
    d->pb = strata__raft__raft_message__unpack(&alloc, len, bytes);
    if (d->pb == NULL) {
        raft_msg_free(d);
        return bad(err, "not a RaftMessage");
    }
    Strata__Raft__RaftMessage *pb = d->pb;
    memset(out, 0, sizeof *out);
    if (pb->from_id == 0) {
        raft_msg_free(d);
        return bad(err, "sender id 0");
    }
    /* Every message: snprintf cost more than the rest of the header's decoding. */
    u64_decimal(pb->from_id, d->address);
    out->server_id = pb->from_id;
    out->server_address = d->address;
    unsigned char version = (unsigned char)(pb->version > 255 ? 255 : pb->version);

    switch (pb->body_case) {
    case STRATA__RAFT__RAFT_MESSAGE__BODY_APPEND_ENTRIES: {
        const Strata__Raft__RaftAppendEntries *a = pb->append_entries;
        struct raft_append_entries *m = &out->append_entries;
        out->type = RAFT_APPEND_ENTRIES;
        m->version = version;
        m->term = a->term;
        m->prev_log_index = a->prev_log_index;
        m->prev_log_term = a->prev_log_term;
        m->leader_commit = a->leader_commit;
        /* C-Raft asserts these instead of checking them: refuse them here. */
        if (a->term == 0 || (a->prev_log_index == 0) != (a->prev_log_term == 0) ||
            a->n_entries > 1u << 20) {
            raft_msg_free(d);
            return bad(err, "append entries header");
        }
        if (a->n_entries > 0) {
            d->entries = calloc(a->n_entries, sizeof *d->entries);
            /* C-Raft frees entries[0].batch itself when it does not keep the entries
             * for persistence (raft_host.c tells which); payloads stay in d->pb. */
            d->batch = raft_malloc(1);
            if (d->entries == NULL || d->batch == NULL) {
                raft_msg_free(d);
                return strata_err_set(err, ERR_NOMEM, "raft message decode");
            }
            for (size_t i = 0; i < a->n_entries; i++) {
                const Strata__Raft__RaftEntry *e = a->entries[i];
                if (e->term == 0 || e->term > a->term || e->type < RAFT_COMMAND ||
                    e->type > RAFT_CHANGE) {
                    raft_msg_free(d);
                    return bad(err, "entry");
                }
                /* The core decodes configuration entries and trusts the result. */
                if (e->type == RAFT_CHANGE && !valid_configuration(e->data.data, e->data.len)) {
                    raft_msg_free(d);
                    return bad(err, "configuration entry");
                }
                d->entries[i].term = e->term;
                d->entries[i].type = (enum raft_entry_type)e->type;
                d->entries[i].buf.base = e->data.data;
                d->entries[i].buf.len = e->data.len;
                d->entries[i].batch = d->batch;
            }
            m->entries = d->entries;
            m->n_entries = (unsigned)a->n_entries;
        }
        break;
    }
    case STRATA__RAFT__RAFT_MESSAGE__BODY_APPEND_ENTRIES_RESULT: {
        const Strata__Raft__RaftAppendEntriesResult *a = pb->append_entries_result;
        struct raft_append_entries_result *m = &out->append_entries_result;
        out->type = RAFT_APPEND_ENTRIES_RESULT;
        m->version = version;
        m->term = a->term;
        m->rejected = a->rejected;
        m->last_log_index = a->last_log_index;
        m->features = (unsigned short)a->features;
        m->capacity = (unsigned short)a->capacity;
        break;
    }
    case STRATA__RAFT__RAFT_MESSAGE__BODY_REQUEST_VOTE: {
        const Strata__Raft__RaftRequestVote *a = pb->request_vote;
        struct raft_request_vote *m = &out->request_vote;
        out->type = RAFT_REQUEST_VOTE;
        m->version = version;
        m->term = a->term;
        m->candidate_id = a->candidate_id;
        m->last_log_index = a->last_log_index;
        m->last_log_term = a->last_log_term;
        m->disrupt_leader = a->disrupt_leader;
        m->pre_vote = a->pre_vote;
        if (a->candidate_id != pb->from_id) {
            raft_msg_free(d);
            return bad(err, "candidate is not the sender");
        }
        break;
    }
    case STRATA__RAFT__RAFT_MESSAGE__BODY_REQUEST_VOTE_RESULT: {
        const Strata__Raft__RaftRequestVoteResult *a = pb->request_vote_result;
        struct raft_request_vote_result *m = &out->request_vote_result;
        out->type = RAFT_REQUEST_VOTE_RESULT;
        m->version = version;
        m->term = a->term;
        m->vote_granted = a->vote_granted;
        m->pre_vote = a->pre_vote;
        m->features = (unsigned short)a->features;
        m->capacity = (unsigned short)a->capacity;
        break;
    }
    case STRATA__RAFT__RAFT_MESSAGE__BODY_TIMEOUT_NOW: {
        const Strata__Raft__RaftTimeoutNow *a = pb->timeout_now;
        struct raft_timeout_now *m = &out->timeout_now;
        out->type = RAFT_TIMEOUT_NOW;
        m->version = version;
        m->term = a->term;
        m->last_log_index = a->last_log_index;
        m->last_log_term = a->last_log_term;
        break;
    }
    case STRATA__RAFT__RAFT_MESSAGE__BODY_INSTALL_SNAPSHOT:
        if (decode_install_snapshot(d, pb->install_snapshot, version, out, err) != 0) {
            raft_msg_free(d);
            return -1;
        }
        break;
    case STRATA__RAFT__RAFT_MESSAGE__BODY_LEADER_CHECK:
    case STRATA__RAFT__RAFT_MESSAGE__BODY_LEADER_CHECK_RESULT: {
        bool result = pb->body_case == STRATA__RAFT__RAFT_MESSAGE__BODY_LEADER_CHECK_RESULT;
        raft_host_check *c = &d->check;
        c->result = result;
        c->term = result ? pb->leader_check_result->term : pb->leader_check->term;
        c->seq = result ? pb->leader_check_result->seq : pb->leader_check->seq;
        c->ok = result && pb->leader_check_result->ok;
        if (c->term == 0 || c->seq == 0) {
            raft_msg_free(d);
            return bad(err, "leader check");
        }
        d->is_check = true;
        out->type = (enum raft_message_type)RAFT_HOST_MSG_CHECK;
        break;
    }
    default:
        raft_msg_free(d);
        return bad(err, "no body");
    }
    *group = pb->group_id;
    *from = pb->from_id;
    *owner = d;
    return 0;
}

void raft_msg_free(raft_msg_decoded *d)
{
    if (d == NULL)
        return;
    arena_free(&d->scratch); /* d->pb and everything in it */
    free(d->entries);
    if (d->batch != NULL)
        raft_free(d->batch);
    if (d->conf_owned)
        raft_configuration_close(&d->conf);
    free(d);
}

bool raft_msg_check(const raft_msg_decoded *d, raft_host_check *out)
{
    if (!d->is_check)
        return false;
    *out = d->check;
    return true;
}

void raft_msg_conf_consumed(raft_msg_decoded *d)
{
    d->conf_owned = false;
}

void raft_msg_batch_consumed(raft_msg_decoded *d)
{
    d->batch = NULL;
}
