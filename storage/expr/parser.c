/*
 * Parser and semantic analysis for every expression kind, and the request context.
 *
 * Parsing is recursive descent over the token array. A syntax error is reported at the
 * farthest token any alternative reached, quoting it and its neighbours as DynamoDB
 * does. Semantic problems (reserved words, undefined placeholders, bad function use,
 * overlapping paths, limits) are collected by category while parsing and checking, and
 * the first category in DynamoDB's order for the kind is reported, so one expression
 * with several problems reports the same one DynamoDB would.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/data/base64.h"
#include "storage/data/ddbjson.h"
#include "storage/expr/expr_int.h"

/* Semantic error categories. */
typedef enum {
    SE_SIZE_LIMIT,
    SE_OPCOUNT,
    SE_DEPTH,
    SE_IN_LIMIT,
    SE_PARENS,
    SE_UNKNOWN_FUNC,
    SE_MISUSED_FUNC,
    SE_RESERVED,
    SE_SECTION,
    SE_UNDEF_NAME,
    SE_UNDEF_VALUE,
    SE_OVERLAP,
    SE_CONFLICT,
    SE_OPERAND,
    SE_DISTINCT,
    SE_FUNCTION,
    SE_COUNT
} sem_cat;

/* DynamoDB's reporting order for conditions (also filters, key conditions, projections)
 * and for updates. */
static const sem_cat cond_order[] = {
    SE_OPCOUNT,      SE_DEPTH,    SE_IN_LIMIT,   SE_PARENS,      SE_UNKNOWN_FUNC,
    SE_MISUSED_FUNC, SE_RESERVED, SE_UNDEF_NAME, SE_UNDEF_VALUE, SE_OVERLAP,
    SE_CONFLICT,     SE_OPERAND,  SE_DISTINCT,   SE_FUNCTION,
};
static const sem_cat update_order[] = {
    SE_OPCOUNT,     SE_DEPTH,   SE_RESERVED, SE_UNKNOWN_FUNC, SE_SECTION,  SE_UNDEF_NAME,
    SE_UNDEF_VALUE, SE_OVERLAP, SE_CONFLICT, SE_OPERAND,      SE_FUNCTION,
};

#define ARGS_MAX 4096
/* Nesting of parentheses and NOTs. Deeper nesting than this cannot be a valid expression
 * within EXPR_TEXT_MAX bytes anyway (it would need redundant parentheses). */
#define NESTING_MAX 512

typedef struct {
    expr_ctx *c;
    arena *a;
    expr_kind kind;
    const char *text;
    size_t len;
    token *toks;
    uint32_t ntoks;
    uint32_t pos;
    uint32_t fail_pos; /* farthest token where an alternative failed */
    bool nomem;
    char *sem[SE_COUNT];
    uint32_t opcount;
    uint32_t depth;   /* grammar recursion depth, bounded to protect the stack */
    bool sections[5]; /* update: which of SET/REMOVE/ADD/DELETE were seen */
    /* growing list of every document path seen */
    expr_path **refs;
    uint32_t nrefs, refs_cap;
} parser;

static void sem_set(parser *p, sem_cat cat, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void sem_set(parser *p, sem_cat cat, const char *fmt, ...)
{
    if (p->sem[cat] != NULL)
        return;
    char msg[STRATA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    p->sem[cat] = arena_strndup(p->a, msg, strlen(msg));
    if (p->sem[cat] == NULL)
        p->nomem = true;
}

static token *cur(parser *p)
{
    return &p->toks[p->pos];
}

static tok_type cur_type(parser *p)
{
    return p->toks[p->pos].type;
}

static void *fail(parser *p)
{
    if (p->pos > p->fail_pos)
        p->fail_pos = p->pos;
    return NULL;
}

static bool is_kw(parser *p, const char *kw)
{
    return expr_tok_is_kw(p->text, cur(p), kw);
}

static bool is_cond_kind(expr_kind k)
{
    return k == EXPR_CONDITION || k == EXPR_FILTER || k == EXPR_KEY_CONDITION;
}

/* Keywords cannot be attribute names or function names: the grammar owns them. */
static bool tok_is_keyword(parser *p, const token *t)
{
    static const char *const cond_kw[] = {"AND", "OR", "NOT", "BETWEEN", "IN"};
    static const char *const upd_kw[] = {"SET", "REMOVE", "ADD", "DELETE"};
    if (t->type != T_IDENT)
        return false;
    if (is_cond_kind(p->kind)) {
        for (size_t i = 0; i < sizeof(cond_kw) / sizeof(cond_kw[0]); i++)
            if (expr_tok_is_kw(p->text, t, cond_kw[i]))
                return true;
    } else if (p->kind == EXPR_UPDATE) {
        for (size_t i = 0; i < sizeof(upd_kw) / sizeof(upd_kw[0]); i++)
            if (expr_tok_is_kw(p->text, t, upd_kw[i]))
                return true;
    }
    return false;
}

static node *mk(parser *p, node_kind kind)
{
    node *n = arena_zalloc(p->a, sizeof(*n));
    if (n == NULL)
        p->nomem = true;
    else {
        n->kind = kind;
        n->tok = p->pos;
    }
    return n;
}

/* ---- Placeholder resolution ---- */

static int cmp_ph(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int r = memcmp(a, b, n);
    if (r != 0)
        return r;
    return alen < blen ? -1 : alen > blen;
}

static int cmp_name_entries(const void *x, const void *y)
{
    const name_entry *a = x, *b = y;
    return cmp_ph(a->ph, a->ph_len, b->ph, b->ph_len);
}

/* Binary search (a request may carry many thousands of names). */
static name_entry *find_name(expr_ctx *c, const char *ph, size_t len)
{
    if (c->nnames == 0)
        return NULL;
    if (!c->names_sorted) {
        qsort(c->names, c->nnames, sizeof(name_entry), cmp_name_entries);
        c->names_sorted = true;
    }
    size_t lo = 0, hi = c->nnames;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = cmp_ph(c->names[mid].ph, c->names[mid].ph_len, ph, len);
        if (r == 0)
            return &c->names[mid];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static const av *resolve_value(parser *p, const token *t)
{
    const char *ph = p->text + t->off;
    const av *v = NULL;
    if (p->c->values != NULL)
        v = av_map_get(p->c->values, ph, t->len);
    if (v == NULL) {
        sem_set(p, SE_UNDEF_VALUE,
                "An expression attribute value used in expression is not defined; attribute "
                "value: %.*s",
                (int)t->len, ph);
        return NULL;
    }
    const av_attr *attrs = p->c->values->u.map.attrs;
    size_t idx = (size_t)((const char *)v - (const char *)&attrs[0].value) / sizeof(av_attr);
    p->c->value_used[idx] = true;
    return v;
}

/* Resolves one path element token (identifier or #name) into `e`. */
static void resolve_elem(parser *p, const token *t, path_elem *e)
{
    const char *s = p->text + t->off;
    e->index = 0;
    if (t->type == T_NAME) {
        name_entry *ne = find_name(p->c, s, t->len);
        if (ne == NULL) {
            sem_set(p, SE_UNDEF_NAME,
                    "An expression attribute name used in the document path is not defined; "
                    "attribute name: %.*s",
                    (int)t->len, s);
            e->name = s; /* keep something printable */
            e->len = t->len;
            return;
        }
        ne->used = true;
        e->name = ne->name;
        e->len = ne->name_len;
    } else {
        if (expr_is_reserved(s, t->len))
            sem_set(p, SE_RESERVED, "Attribute name is a reserved keyword; reserved keyword: %.*s",
                    (int)t->len, s);
        e->name = s;
        e->len = t->len;
    }
}

static void add_ref(parser *p, expr_path *path)
{
    if (p->nrefs == p->refs_cap) {
        uint32_t cap = p->refs_cap ? p->refs_cap * 2 : 8;
        expr_path **r = arena_alloc(p->a, cap * sizeof(*r));
        if (r == NULL) {
            p->nomem = true;
            return;
        }
        if (p->nrefs)
            memcpy(r, p->refs, p->nrefs * sizeof(*r));
        p->refs = r;
        p->refs_cap = cap;
    }
    p->refs[p->nrefs++] = path;
}

/* ---- Grammar: document paths and operands ---- */

static bool at_path_head(parser *p)
{
    token *t = cur(p);
    return t->type == T_NAME || (t->type == T_IDENT && !tok_is_keyword(p, t));
}

/* path := (ident | #name) ( '.' (ident | #name) | '[' digits ']' )* */
static int parse_path(parser *p, expr_path *out)
{
    path_elem tmp[EXPR_PATH_DEPTH_MAX + 1];
    uint32_t n = 0;
    if (!at_path_head(p)) {
        fail(p);
        return -1;
    }
    resolve_elem(p, cur(p), &tmp[n++]);
    p->pos++;
    for (;;) {
        path_elem e;
        if (cur_type(p) == T_DOT) {
            p->pos++;
            if (!at_path_head(p)) {
                fail(p);
                return -1;
            }
            resolve_elem(p, cur(p), &e);
            p->pos++;
        } else if (cur_type(p) == T_LBRACK) {
            p->pos++;
            token *t = cur(p);
            if (t->type != T_NUMBER || t->len > 9) {
                fail(p);
                return -1;
            }
            uint32_t v = 0;
            for (uint32_t i = 0; i < t->len; i++)
                v = v * 10 + (uint32_t)(p->text[t->off + i] - '0');
            p->pos++;
            if (cur_type(p) != T_RBRACK) {
                fail(p);
                return -1;
            }
            p->pos++;
            e.name = NULL;
            e.len = 0;
            e.index = v;
        } else {
            break;
        }
        if (n < EXPR_PATH_DEPTH_MAX + 1)
            tmp[n] = e;
        n++;
    }
    if (n > EXPR_PATH_DEPTH_MAX) {
        sem_set(p, SE_DEPTH, "The document path has too many nesting levels; nesting levels: %u",
                n);
        n = EXPR_PATH_DEPTH_MAX;
    }
    out->count = n;
    out->elems = arena_memdup(p->a, tmp, n * sizeof(path_elem));
    if (out->elems == NULL) {
        p->nomem = true;
        return -1;
    }
    return 0;
}

static node *parse_operand(parser *p);

/* args := operand (',' operand)*; stops before ')'. */
static node **parse_arg_list(parser *p, uint32_t *count)
{
    node *tmp[64];
    uint32_t n = 0, cap = 64;
    node **v = tmp;
    for (;;) {
        node *arg = parse_operand(p);
        if (arg == NULL)
            return NULL;
        if (n == cap) {
            if (cap >= ARGS_MAX) {
                fail(p);
                return NULL;
            }
            node **grown = arena_alloc(p->a, cap * 2 * sizeof(node *));
            if (grown == NULL) {
                p->nomem = true;
                return NULL;
            }
            memcpy(grown, v, n * sizeof(node *));
            v = grown;
            cap *= 2;
        }
        v[n++] = arg;
        if (cur_type(p) != T_COMMA)
            break;
        p->pos++;
    }
    node **out = arena_memdup(p->a, v, n * sizeof(node *));
    if (out == NULL) {
        p->nomem = true;
        return NULL;
    }
    *count = n;
    return out;
}

static func_id func_lookup(const char *s, size_t len)
{
    static const struct {
        const char *name;
        func_id id;
    } funcs[] = {
        {"attribute_exists", F_ATTRIBUTE_EXISTS},
        {"attribute_not_exists", F_ATTRIBUTE_NOT_EXISTS},
        {"attribute_type", F_ATTRIBUTE_TYPE},
        {"begins_with", F_BEGINS_WITH},
        {"contains", F_CONTAINS},
        {"size", F_SIZE},
        {"if_not_exists", F_IF_NOT_EXISTS},
        {"list_append", F_LIST_APPEND},
    };
    for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++) {
        if (strlen(funcs[i].name) == len && memcmp(funcs[i].name, s, len) == 0)
            return funcs[i].id;
    }
    return F_UNKNOWN;
}

/* name '(' args ')' */
static node *parse_function(parser *p)
{
    token *t = cur(p);
    node *n = mk(p, N_FUNC);
    if (n == NULL)
        return NULL;
    n->fname = p->text + t->off;
    n->fname_len = t->len;
    n->func = func_lookup(n->fname, t->len);
    if (p->depth >= NESTING_MAX)
        return fail(p);
    p->pos += 2; /* name and '(' */
    p->depth++;
    n->args = parse_arg_list(p, &n->nargs);
    p->depth--;
    if (n->args == NULL)
        return NULL;
    if (cur_type(p) != T_RPAREN)
        return fail(p);
    p->pos++;
    p->opcount++;
    return n;
}

/* operand := '(' operand ')' | function | :value | path */
static node *parse_operand(parser *p)
{
    token *t = cur(p);
    if (t->type == T_LPAREN) {
        if (p->depth >= NESTING_MAX)
            return fail(p);
        p->pos++;
        p->depth++;
        node *inner = parse_operand(p);
        p->depth--;
        if (inner == NULL)
            return NULL;
        if (cur_type(p) != T_RPAREN)
            return fail(p);
        p->pos++;
        if (inner->parens < 255)
            inner->parens++;
        return inner;
    }
    if (t->type == T_VALUE) {
        node *n = mk(p, N_VALUE);
        if (n == NULL)
            return NULL;
        n->value = resolve_value(p, t);
        p->pos++;
        return n;
    }
    if (t->type == T_IDENT && !tok_is_keyword(p, t) && p->toks[p->pos + 1].type == T_LPAREN)
        return parse_function(p);
    node *n = mk(p, N_PATH);
    if (n == NULL)
        return NULL;
    if (parse_path(p, &n->path) != 0)
        return NULL;
    add_ref(p, &n->path);
    return n;
}

/* ---- Grammar: conditions ---- */

static node *parse_or(parser *p);

static bool is_bare_operand(const node *n)
{
    return n->kind == N_PATH || n->kind == N_VALUE;
}

static bool is_comparator(tok_type t)
{
    return t == T_EQ || t == T_NE || t == T_LT || t == T_LE || t == T_GT || t == T_GE;
}

static node *mk2(parser *p, node_kind kind, node *a, node *b)
{
    node *n = mk(p, kind);
    if (n == NULL)
        return NULL;
    n->args = arena_alloc(p->a, 2 * sizeof(node *));
    if (n->args == NULL) {
        p->nomem = true;
        return NULL;
    }
    n->args[0] = a;
    n->args[1] = b;
    n->nargs = b ? 2 : 1;
    p->opcount++;
    return n;
}

/* The part after a left operand: comparator, BETWEEN or IN. Returns lhs itself when no
 * such part follows and lhs is a function (a boolean function used as a condition). */
static node *parse_comparison_tail(parser *p, node *lhs)
{
    tok_type tt = cur_type(p);
    if (is_comparator(tt)) {
        p->pos++;
        node *rhs = parse_operand(p);
        if (rhs == NULL)
            return NULL;
        node *n = mk2(p, N_CMP, lhs, rhs);
        if (n)
            n->op = tt;
        return n;
    }
    if (is_kw(p, "BETWEEN")) {
        p->pos++;
        node *lo = parse_operand(p);
        if (lo == NULL)
            return NULL;
        if (!is_kw(p, "AND"))
            return fail(p);
        p->pos++;
        node *hi = parse_operand(p);
        if (hi == NULL)
            return NULL;
        node *n = mk(p, N_BETWEEN);
        if (n == NULL)
            return NULL;
        n->args = arena_alloc(p->a, 3 * sizeof(node *));
        if (n->args == NULL) {
            p->nomem = true;
            return NULL;
        }
        n->args[0] = lhs;
        n->args[1] = lo;
        n->args[2] = hi;
        n->nargs = 3;
        p->opcount++;
        return n;
    }
    if (is_kw(p, "IN")) {
        p->pos++;
        if (cur_type(p) != T_LPAREN)
            return fail(p);
        p->pos++;
        uint32_t count;
        node **list = parse_arg_list(p, &count);
        if (list == NULL)
            return NULL;
        if (cur_type(p) != T_RPAREN)
            return fail(p);
        p->pos++;
        node *n = mk(p, N_IN);
        if (n == NULL)
            return NULL;
        n->args = arena_alloc(p->a, (count + 1) * sizeof(node *));
        if (n->args == NULL) {
            p->nomem = true;
            return NULL;
        }
        n->args[0] = lhs;
        memcpy(n->args + 1, list, count * sizeof(node *));
        n->nargs = count + 1;
        p->opcount++;
        return n;
    }
    return lhs; /* a bare operand: the caller decides whether that is allowed */
}

/* primary := '(' or_expr ')' [comparison tail if it was an operand]
 *          | operand comparison-tail | function */
static node *parse_primary(parser *p)
{
    if (cur_type(p) == T_LPAREN) {
        if (p->depth >= NESTING_MAX)
            return fail(p);
        p->pos++;
        p->depth++;
        node *inner = parse_or(p);
        p->depth--;
        if (inner == NULL)
            return NULL;
        if (cur_type(p) != T_RPAREN)
            return fail(p);
        p->pos++;
        if (inner->parens < 255)
            inner->parens++;
        /* "(a) = :v", "(size(a)) > :n": a parenthesised operand. */
        if (is_bare_operand(inner) || inner->kind == N_FUNC)
            return parse_comparison_tail(p, inner);
        return inner;
    }
    node *lhs = parse_operand(p);
    if (lhs == NULL)
        return NULL;
    return parse_comparison_tail(p, lhs);
}

static node *parse_not(parser *p)
{
    if (is_kw(p, "NOT")) {
        if (p->depth >= NESTING_MAX)
            return fail(p);
        p->pos++;
        p->depth++;
        node *inner = parse_not(p);
        p->depth--;
        if (inner == NULL)
            return NULL;
        if (is_bare_operand(inner))
            return fail(p);
        return mk2(p, N_NOT, inner, NULL);
    }
    return parse_primary(p);
}

static node *parse_and(parser *p)
{
    node *left = parse_not(p);
    while (left != NULL && is_kw(p, "AND")) {
        if (is_bare_operand(left))
            return fail(p);
        p->pos++;
        node *right = parse_not(p);
        if (right == NULL)
            return NULL;
        if (is_bare_operand(right))
            return fail(p);
        left = mk2(p, N_AND, left, right);
    }
    return left;
}

static node *parse_or(parser *p)
{
    node *left = parse_and(p);
    while (left != NULL && is_kw(p, "OR")) {
        if (is_bare_operand(left))
            return fail(p);
        p->pos++;
        node *right = parse_and(p);
        if (right == NULL)
            return NULL;
        if (is_bare_operand(right))
            return fail(p);
        left = mk2(p, N_OR, left, right);
    }
    return left;
}

/* ---- Grammar: updates ---- */

/* arith := operand [('+' | '-') operand] */
static node *parse_arith(parser *p)
{
    node *a = parse_operand(p);
    if (a == NULL)
        return NULL;
    tok_type tt = cur_type(p);
    if (tt != T_PLUS && tt != T_MINUS)
        return a;
    p->pos++;
    node *b = parse_operand(p);
    if (b == NULL)
        return NULL;
    return mk2(p, tt == T_PLUS ? N_PLUS : N_MINUS, a, b);
}

/* set_value := '(' arith ')' | arith */
static node *parse_set_value(parser *p)
{
    uint32_t save = p->pos;
    uint32_t save_ops = p->opcount;
    if (cur_type(p) == T_LPAREN) {
        p->pos++;
        node *n = parse_arith(p);
        if (n != NULL && cur_type(p) == T_RPAREN) {
            p->pos++;
            if (n->parens < 255)
                n->parens++;
            /* "(a) + b": the parenthesis closed only the first operand. */
            if (cur_type(p) != T_PLUS && cur_type(p) != T_MINUS)
                return n;
        } else if (n != NULL) {
            fail(p);
        }
        p->pos = save;
        p->opcount = save_ops;
    }
    return parse_arith(p);
}

typedef struct {
    update_action *v;
    uint32_t n, cap;
} act_vec;

static update_action *push_action(parser *p, act_vec *acts)
{
    if (acts->n == acts->cap) {
        uint32_t cap = acts->cap ? acts->cap * 2 : 8;
        update_action *v = arena_alloc(p->a, cap * sizeof(*v));
        if (v == NULL) {
            p->nomem = true;
            return NULL;
        }
        if (acts->n)
            memcpy(v, acts->v, acts->n * sizeof(*v));
        acts->v = v;
        acts->cap = cap;
    }
    update_action *a = &acts->v[acts->n++];
    memset(a, 0, sizeof(*a));
    return a;
}

static int parse_update(parser *p, act_vec *acts)
{
    static const char *const section_names[] = {"SET", "REMOVE", "ADD", "DELETE"};
    if (cur_type(p) == T_EOF) {
        fail(p);
        return -1;
    }
    while (cur_type(p) != T_EOF) {
        int sec = -1;
        for (int i = 0; i < 4; i++)
            if (is_kw(p, section_names[i]))
                sec = i;
        if (sec < 0) {
            fail(p);
            return -1;
        }
        if (p->sections[sec])
            sem_set(p, SE_SECTION,
                    "The \"%s\" section can only be used once in an update expression;",
                    section_names[sec]);
        p->sections[sec] = true;
        p->pos++;
        for (;;) {
            update_action *act = push_action(p, acts);
            if (act == NULL)
                return -1;
            act->kind = (act_kind)(sec + 1);
            if (parse_path(p, &act->path) != 0)
                return -1;
            add_ref(p, &act->path);
            if (act->kind == ACT_SET) {
                if (cur_type(p) != T_EQ) {
                    fail(p);
                    return -1;
                }
                p->pos++;
                act->value = parse_set_value(p);
                if (act->value == NULL)
                    return -1;
            } else if (act->kind == ACT_ADD || act->kind == ACT_DELETE) {
                if (cur_type(p) != T_VALUE) {
                    fail(p);
                    return -1;
                }
                act->value = mk(p, N_VALUE);
                if (act->value == NULL)
                    return -1;
                act->value->value = resolve_value(p, cur(p));
                p->pos++;
            }
            if (cur_type(p) != T_COMMA)
                break;
            p->pos++;
        }
    }
    return 0;
}

/* ---- Semantic checks ---- */

static const char *func_display_name(const node *n, int *len)
{
    *len = (int)n->fname_len;
    return n->fname;
}

static bool paths_equal(const expr_path *a, const expr_path *b)
{
    return a->count == b->count && expr_path_relation(a, b) == PATHS_OVERLAP;
}

/* DynamoDB's type of an operand known before evaluation: a literal's type, N for size()
 * and arithmetic, L for list_append; 0 if unknown (a document path). */
static av_type static_type(const node *n)
{
    switch (n->kind) {
    case N_VALUE:
        return n->value ? n->value->type : 0;
    case N_FUNC:
        if (n->func == F_SIZE)
            return AV_N;
        if (n->func == F_LIST_APPEND)
            return AV_L;
        if (n->func == F_IF_NOT_EXISTS && n->nargs == 2)
            return static_type(n->args[1]);
        return 0;
    case N_PLUS:
    case N_MINUS:
        return AV_N;
    default:
        return 0;
    }
}

static bool is_bool_func(func_id f)
{
    return f == F_ATTRIBUTE_EXISTS || f == F_ATTRIBUTE_NOT_EXISTS || f == F_ATTRIBUTE_TYPE ||
           f == F_BEGINS_WITH || f == F_CONTAINS;
}

static void format_value_brief(const av *v, char *out, size_t cap)
{
    const char *tn = av_type_name(v->type);
    if (v->type == AV_S) {
        snprintf(out, cap, "{%s:%.*s}", tn, (int)(v->u.bytes.len > 200 ? 200 : v->u.bytes.len),
                 (const char *)v->u.bytes.ptr);
    } else if (v->type == AV_N) {
        char digits[NUM_TEXT_MAX];
        size_t n = num_format(&v->u.n, digits, sizeof(digits));
        snprintf(out, cap, "{%s:%.*s}", tn, (int)n, digits);
    } else if (v->type == AV_B && v->u.bytes.len <= 120) {
        char b64[200];
        size_t n = b64_encoded_len(v->u.bytes.len);
        b64_encode(v->u.bytes.ptr, v->u.bytes.len, b64);
        snprintf(out, cap, "{%s:%.*s}", tn, (int)n, b64);
    } else {
        snprintf(out, cap, "{%s}", tn ? tn : "?");
    }
}

static void check_distinct(parser *p, const char *opname, int oplen, node *a, node *b)
{
    if (a->kind != N_PATH || b->kind != N_PATH || !paths_equal(&a->path, &b->path))
        return;
    char ps[256];
    expr_path_format(&a->path, ps, sizeof(ps));
    sem_set(p, SE_DISTINCT,
            "The first operand must be distinct from the remaining operands for this operator "
            "or function; operator: %.*s, first operand: %s",
            oplen, opname, ps);
}

static void check_parens(parser *p, const node *n)
{
    if (n->parens > 1)
        sem_set(p, SE_PARENS, "The expression has redundant parentheses;");
}

static void check_cond_node(parser *p, node *n, bool as_condition);

static void check_operand_type(parser *p, const node *fn, const node *arg, bool (*ok)(av_type))
{
    av_type t = static_type(arg);
    if (t != 0 && !ok(t)) {
        int len;
        const char *name = func_display_name(fn, &len);
        sem_set(p, SE_FUNCTION,
                "Incorrect operand type for operator or function; operator or function: %.*s, "
                "operand type: %s",
                len, name, av_type_name(t));
    }
}

static bool type_is_s_or_b(av_type t)
{
    return t == AV_S || t == AV_B;
}

static bool type_has_size(av_type t)
{
    return t != AV_N && t != AV_BOOL && t != AV_NULL;
}

static void check_cond_function(parser *p, node *n, bool as_condition)
{
    int len;
    const char *name = func_display_name(n, &len);
    bool cond_func = n->func != F_UNKNOWN && n->func != F_IF_NOT_EXISTS && n->func != F_LIST_APPEND;
    if (!cond_func) {
        sem_set(p, SE_UNKNOWN_FUNC, "Invalid function name; function: %.*s", len, name);
        return;
    }
    if (as_condition != is_bool_func(n->func))
        sem_set(p, SE_MISUSED_FUNC,
                "The function is not allowed to be used this way in an expression; function: "
                "%.*s",
                len, name);
    for (uint32_t i = 0; i < n->nargs; i++)
        check_cond_node(p, n->args[i], false);
    static const uint32_t arity[] = {
        [F_ATTRIBUTE_EXISTS] = 1, [F_ATTRIBUTE_NOT_EXISTS] = 1,
        [F_ATTRIBUTE_TYPE] = 2,   [F_BEGINS_WITH] = 2,
        [F_CONTAINS] = 2,         [F_SIZE] = 1,
    };
    if (n->nargs != arity[n->func]) {
        sem_set(p, SE_OPERAND,
                "Incorrect number of operands for operator or function; operator or function: "
                "%.*s, number of operands: %u",
                len, name, n->nargs);
        return;
    }
    if (n->nargs == 2)
        check_distinct(p, name, len, n->args[0], n->args[1]);
    switch (n->func) {
    case F_ATTRIBUTE_EXISTS:
    case F_ATTRIBUTE_NOT_EXISTS:
        if (n->args[0]->kind != N_PATH)
            sem_set(p, SE_FUNCTION,
                    "Operator or function requires a document path; operator or function: %.*s",
                    len, name);
        break;
    case F_ATTRIBUTE_TYPE: {
        if (n->args[0]->kind != N_PATH) {
            sem_set(p, SE_FUNCTION,
                    "Operator or function requires a document path; operator or function: %.*s",
                    len, name);
            break;
        }
        av_type t = static_type(n->args[1]);
        if (t != AV_S) {
            sem_set(p, SE_FUNCTION,
                    "Incorrect operand type for operator or function; operator or function: "
                    "%.*s, operand type: %s",
                    len, name, t ? av_type_name(t) : "{NS,SS,L,BS,N,M,B,BOOL,NULL,S}");
            break;
        }
        const av *v = n->args[1]->value;
        if (v != NULL && av_type_from_name((const char *)v->u.bytes.ptr, v->u.bytes.len) == 0)
            sem_set(p, SE_FUNCTION,
                    "Invalid attribute type name found; type: %.*s, valid types: "
                    "{B,NULL,SS,BOOL,L,BS,N,NS,S,M}",
                    (int)(v->u.bytes.len > 100 ? 100 : v->u.bytes.len),
                    (const char *)v->u.bytes.ptr);
        break;
    }
    case F_BEGINS_WITH:
        check_operand_type(p, n, n->args[0], type_is_s_or_b);
        check_operand_type(p, n, n->args[1], type_is_s_or_b);
        break;
    case F_SIZE:
        check_operand_type(p, n, n->args[0], type_has_size);
        break;
    default:
        break;
    }
}

static const char *cmp_name(tok_type t)
{
    switch (t) {
    case T_EQ:
        return "=";
    case T_NE:
        return "<>";
    case T_LT:
        return "<";
    case T_LE:
        return "<=";
    case T_GT:
        return ">";
    case T_GE:
        return ">=";
    default:
        return "?";
    }
}

static void check_between_bounds(parser *p, const node *lo, const node *hi)
{
    if (lo->kind != N_VALUE || hi->kind != N_VALUE || lo->value == NULL || hi->value == NULL)
        return;
    char a[300], b[300];
    format_value_brief(lo->value, a, sizeof(a));
    format_value_brief(hi->value, b, sizeof(b));
    if (lo->value->type != hi->value->type) {
        sem_set(p, SE_FUNCTION,
                "The BETWEEN operator requires same data type for lower and upper bounds; lower "
                "bound operand: AttributeValue: %s, upper bound operand: AttributeValue: %s",
                a, b);
        return;
    }
    av_type t = lo->value->type;
    if ((t == AV_S || t == AV_N || t == AV_B) && av_cmp_scalar(lo->value, hi->value) > 0)
        sem_set(p, SE_FUNCTION,
                "The BETWEEN operator requires upper bound to be greater than or equal to lower "
                "bound; lower bound operand: AttributeValue: %s, upper bound operand: "
                "AttributeValue: %s",
                a, b);
}

static const char *update_type_word(av_type t);

/* Ordering comparisons and BETWEEN need S, N or B; a literal of another type is a
 * validation error (a document path of another type just makes the comparison false). */
static void check_ordered_operand(parser *p, const char *op, const node *n)
{
    if (n->kind != N_VALUE || n->value == NULL)
        return;
    av_type t = n->value->type;
    if (t == AV_S || t == AV_N || t == AV_B)
        return;
    const char *word = update_type_word(t);
    sem_set(p, SE_FUNCTION,
            "Incorrect operand type for operator or function; operator or function: %s, operand "
            "type: %s",
            op, word ? word : av_type_name(t));
}

static void check_cond_node(parser *p, node *n, bool as_condition)
{
    check_parens(p, n);
    switch (n->kind) {
    case N_AND:
    case N_OR:
    case N_NOT:
        for (uint32_t i = 0; i < n->nargs; i++)
            check_cond_node(p, n->args[i], true);
        break;
    case N_CMP: {
        check_cond_node(p, n->args[0], false);
        check_cond_node(p, n->args[1], false);
        const char *op = cmp_name(n->op);
        check_distinct(p, op, (int)strlen(op), n->args[0], n->args[1]);
        if (n->op != T_EQ && n->op != T_NE) {
            check_ordered_operand(p, op, n->args[0]);
            check_ordered_operand(p, op, n->args[1]);
        }
        break;
    }
    case N_BETWEEN:
        for (uint32_t i = 0; i < n->nargs; i++)
            check_cond_node(p, n->args[i], false);
        for (uint32_t i = 0; i < n->nargs; i++)
            check_ordered_operand(p, "BETWEEN", n->args[i]);
        check_between_bounds(p, n->args[1], n->args[2]);
        break;
    case N_IN:
        if (n->nargs - 1 > EXPR_IN_MAX && !p->c->legacy)
            sem_set(p, SE_IN_LIMIT,
                    "The IN operator is provided with too many operands; number of operands: %u",
                    n->nargs - 1);
        for (uint32_t i = 0; i < n->nargs; i++)
            check_cond_node(p, n->args[i], false);
        break;
    case N_FUNC:
        check_cond_function(p, n, as_condition);
        break;
    default:
        break;
    }
}

static const char *update_type_word(av_type t)
{
    switch (t) {
    case AV_S:
        return "STRING";
    case AV_N:
        return "NUMBER";
    case AV_B:
        return "BINARY";
    case AV_NULL:
        return "NULL";
    case AV_BOOL:
        return "BOOLEAN";
    case AV_L:
        return "LIST";
    case AV_M:
        return "MAP";
    default:
        return NULL;
    }
}

static void check_update_value(parser *p, node *n)
{
    int len;
    const char *name;
    switch (n->kind) {
    case N_PLUS:
    case N_MINUS: {
        const char *op = n->kind == N_PLUS ? "+" : "-";
        for (int i = 0; i < 2; i++) {
            check_update_value(p, n->args[i]);
            av_type t = n->args[i]->kind == N_VALUE ? static_type(n->args[i]) : 0;
            if (t != 0 && t != AV_N)
                sem_set(p, SE_FUNCTION,
                        "Incorrect operand type for operator or function; operator or function: "
                        "%s, operand type: %s",
                        op, av_type_name(t));
        }
        break;
    }
    case N_FUNC: {
        name = func_display_name(n, &len);
        if (n->func != F_IF_NOT_EXISTS && n->func != F_LIST_APPEND) {
            sem_set(p, SE_UNKNOWN_FUNC, "Invalid function name; function: %.*s", len, name);
            return;
        }
        for (uint32_t i = 0; i < n->nargs; i++)
            check_update_value(p, n->args[i]);
        if (n->nargs != 2) {
            sem_set(p, SE_FUNCTION,
                    "Incorrect number of operands for operator or function; operator or "
                    "function: %.*s, number of operands: %u",
                    len, name, n->nargs);
            return;
        }
        if (n->func == F_IF_NOT_EXISTS) {
            if (n->args[0]->kind != N_PATH)
                sem_set(p, SE_FUNCTION,
                        "Operator or function requires a document path; operator or function: "
                        "%.*s",
                        len, name);
        } else {
            for (int i = 0; i < 2; i++) {
                av_type t = n->args[i]->kind == N_VALUE ? static_type(n->args[i]) : 0;
                if (t != 0 && t != AV_L)
                    sem_set(p, SE_FUNCTION,
                            "Incorrect operand type for operator or function; operator or "
                            "function: %.*s, operand type: %s",
                            len, name, av_type_name(t));
            }
        }
        break;
    }
    default:
        break;
    }
}

static void check_overlaps(parser *p, const expr_path *paths, uint32_t n, size_t stride)
{
    for (uint32_t i = 1; i < n; i++) {
        const expr_path *b = (const expr_path *)((const char *)paths + i * stride);
        for (uint32_t j = 0; j < i; j++) {
            const expr_path *a = (const expr_path *)((const char *)paths + j * stride);
            path_relation r = expr_path_relation(a, b);
            if (r == PATHS_DISJOINT)
                continue;
            char pa[200], pb[200];
            expr_path_format(a, pa, sizeof(pa));
            expr_path_format(b, pb, sizeof(pb));
            if (r == PATHS_OVERLAP)
                sem_set(p, SE_OVERLAP,
                        "Two document paths overlap with each other; must remove or rewrite one "
                        "of these paths; path one: %s, path two: %s",
                        pa, pb);
            else
                sem_set(p, SE_CONFLICT,
                        "Two document paths conflict with each other; must remove or rewrite one "
                        "of these paths; path one: %s, path two: %s",
                        pa, pb);
            return;
        }
    }
}

static void check_update(parser *p, expr *e)
{
    for (uint32_t i = 0; i < e->nacts; i++) {
        update_action *act = &e->acts[i];
        if (act->kind == ACT_SET) {
            check_update_value(p, act->value);
        } else if (act->kind == ACT_ADD || act->kind == ACT_DELETE) {
            const av *v = act->value->value;
            if (v == NULL)
                continue;
            const char *word = update_type_word(v->type);
            if (word != NULL && !(act->kind == ACT_ADD && v->type == AV_N))
                sem_set(p, SE_OPERAND,
                        "Incorrect operand type for operator or function; operator: %s, operand "
                        "type: %s",
                        act->kind == ACT_ADD ? "ADD" : "DELETE", word);
        }
    }
    check_overlaps(p, &e->acts[0].path, e->nacts, sizeof(update_action));
}

/* ---- Entry points ---- */

static int syntax_error(parser *p, strata_err *err)
{
    const char *prefix = expr_kind_prefix(p->kind);
    uint32_t i = p->fail_pos < p->ntoks ? p->fail_pos : p->ntoks - 1;
    const token *t = &p->toks[i];
    uint32_t start = i > 0 ? p->toks[i - 1].off : t->off;
    uint32_t end = t->off + t->len;
    if (t->type != T_EOF && i + 1 < p->ntoks && p->toks[i + 1].type != T_EOF)
        end = p->toks[i + 1].off + p->toks[i + 1].len;
    if (t->type == T_EOF)
        return strata_err_set(err, ERR_VALIDATION,
                              "%sSyntax error; token: \"<EOF>\", near: \"%.*s\"", prefix,
                              (int)(end - start), p->text + start);
    return strata_err_set(err, ERR_VALIDATION, "%sSyntax error; token: \"%.*s\", near: \"%.*s\"",
                          prefix, (int)t->len, p->text + t->off, (int)(end - start),
                          p->text + start);
}

static bool all_space(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

static int parse_body(parser *p, expr *e)
{
    if (is_cond_kind(p->kind)) {
        e->cond = parse_or(p);
        if (e->cond == NULL)
            return -1;
        if (is_bare_operand(e->cond)) {
            /* "a" or ":v" alone is not a condition */
            fail(p);
            return -1;
        }
    } else if (p->kind == EXPR_PROJECTION) {
        expr_path tmp[64];
        expr_path *v = tmp;
        uint32_t n = 0, cap = 64;
        for (;;) {
            if (n == cap) {
                expr_path *g = arena_alloc(p->a, cap * 2 * sizeof(expr_path));
                if (g == NULL) {
                    p->nomem = true;
                    return -1;
                }
                memcpy(g, v, n * sizeof(expr_path));
                v = g;
                cap *= 2;
            }
            if (parse_path(p, &v[n]) != 0)
                return -1;
            n++;
            if (cur_type(p) != T_COMMA)
                break;
            p->pos++;
        }
        e->paths = arena_memdup(p->a, v, n * sizeof(expr_path));
        if (e->paths == NULL) {
            p->nomem = true;
            return -1;
        }
        e->npaths = n;
        for (uint32_t i = 0; i < n; i++)
            add_ref(p, &e->paths[i]);
    } else {
        act_vec acts = {0};
        if (parse_update(p, &acts) != 0)
            return -1;
        e->acts = acts.v;
        e->nacts = acts.n;
    }
    if (cur_type(p) != T_EOF) {
        fail(p);
        return -1;
    }
    return 0;
}

expr *expr_parse(expr_ctx *c, expr_kind kind, const char *text, size_t len, strata_err *err)
{
    const char *prefix = expr_kind_prefix(kind);
    if (text == NULL || len == 0 || all_space(text, len)) {
        strata_err_set(err, ERR_VALIDATION, "%sThe expression can not be empty;", prefix);
        return NULL;
    }
    /* The limits on expressions are the expression parameters'; text generated from the
     * legacy parameters (legacy.c, at most LEGACY_TEXT_MAX) is not held to them, or a
     * request would fail naming an expression it never sent. */
    if (len > EXPR_TEXT_MAX && !c->legacy) {
        strata_err_set(err, ERR_VALIDATION,
                       "%sExpression size has exceeded the maximum allowed size; expression "
                       "size: %zu",
                       prefix, len);
        return NULL;
    }
    parser p = {.c = c, .a = c->a, .kind = kind, .text = text, .len = len};
    p.toks = expr_tokenize(c->a, text, len, &p.ntoks);
    expr *e = arena_zalloc(c->a, sizeof(*e));
    if (p.toks == NULL || e == NULL)
        goto nomem;
    e->kind = kind;
    if (parse_body(&p, e) != 0) {
        if (p.nomem)
            goto nomem;
        syntax_error(&p, err);
        return NULL;
    }
    if (p.opcount > EXPR_UPDATE_OPERATORS_MAX && !c->legacy)
        sem_set(&p, SE_OPCOUNT, "The expression contains too many operators; operator count: %u",
                p.opcount);
    if (is_cond_kind(kind))
        check_cond_node(&p, e->cond, true);
    else if (kind == EXPR_PROJECTION)
        check_overlaps(&p, e->paths, e->npaths, sizeof(expr_path));
    else
        check_update(&p, e);
    if (p.nomem)
        goto nomem;
    const sem_cat *order = kind == EXPR_UPDATE ? update_order : cond_order;
    size_t norder = kind == EXPR_UPDATE ? sizeof(update_order) / sizeof(update_order[0])
                                        : sizeof(cond_order) / sizeof(cond_order[0]);
    for (size_t i = 0; i < norder; i++) {
        if (p.sem[order[i]] != NULL) {
            strata_err_set(err, ERR_VALIDATION, "%s%s", prefix, p.sem[order[i]]);
            return NULL;
        }
    }
    e->refs = p.refs;
    e->nrefs = p.nrefs;
    if (kind == EXPR_UPDATE) {
        /* the update's paths, for ReturnValues UPDATED_* */
        e->paths = arena_alloc(c->a, (e->nacts ? e->nacts : 1) * sizeof(expr_path));
        if (e->paths == NULL)
            goto nomem;
        for (uint32_t i = 0; i < e->nacts; i++)
            e->paths[i] = e->acts[i].path;
        e->npaths = e->nacts;
    }
    return e;
nomem:
    strata_err_set(err, ERR_NOMEM, "expression parser: out of memory");
    return NULL;
}

expr_kind expr_get_kind(const expr *e)
{
    return e->kind;
}

bool expr_mentions_attr(const expr *e, const char *name, size_t name_len)
{
    for (uint32_t i = 0; i < e->nrefs; i++) {
        const path_elem *h = &e->refs[i]->elems[0];
        if (h->len == name_len && memcmp(h->name, name, name_len) == 0)
            return true;
    }
    return false;
}

size_t expr_projection_count(const expr *e)
{
    return e->kind == EXPR_PROJECTION ? e->npaths : 0;
}

const char *expr_projection_top_name(const expr *e, size_t i, size_t *len)
{
    if (e->kind != EXPR_PROJECTION || i >= e->npaths)
        return NULL;
    *len = e->paths[i].elems[0].len;
    return e->paths[i].elems[0].name;
}

/* ---- The request context ---- */

expr_ctx *expr_ctx_new(arena *a)
{
    expr_ctx *c = arena_zalloc(a, sizeof(*c));
    if (c != NULL)
        c->a = a;
    return c;
}

static bool placeholder_ok(const char *s, size_t len, char lead)
{
    if (len < 2 || s[0] != lead)
        return false;
    for (size_t i = 1; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_'))
            return false;
    }
    return true;
}

int expr_ctx_add_name(expr_ctx *c, const char *placeholder, size_t placeholder_len,
                      const char *name, size_t name_len, strata_err *err)
{
    int plen = placeholder_len > 300 ? 300 : (int)placeholder_len;
    if (placeholder_len > EXPR_PLACEHOLDER_MAX)
        return strata_err_set(err, ERR_VALIDATION,
                              "ExpressionAttributeNames contains invalid key: The expression "
                              "attribute map contains a key that is too long; size of key: %zu",
                              placeholder_len);
    if (!placeholder_ok(placeholder, placeholder_len, '#'))
        return strata_err_set(err, ERR_VALIDATION,
                              "ExpressionAttributeNames contains invalid key: Syntax error; key: "
                              "\"%.*s\"",
                              plen, placeholder);
    if (name_len == 0)
        return strata_err_set(err, ERR_VALIDATION,
                              "ExpressionAttributeNames contains invalid value: Empty attribute "
                              "name for key %.*s",
                              plen, placeholder);
    if (c->nnames == c->names_cap) {
        uint32_t cap = c->names_cap ? c->names_cap * 2 : 8;
        name_entry *v = arena_alloc(c->a, cap * sizeof(*v));
        if (v == NULL)
            return strata_err_set(err, ERR_NOMEM, "expression names: out of memory");
        if (c->nnames)
            memcpy(v, c->names, c->nnames * sizeof(*v));
        c->names = v;
        c->names_cap = cap;
    }
    name_entry *ne = &c->names[c->nnames];
    ne->ph = arena_strndup(c->a, placeholder, placeholder_len);
    ne->name = arena_strndup(c->a, name, name_len);
    if (ne->ph == NULL || ne->name == NULL)
        return strata_err_set(err, ERR_NOMEM, "expression names: out of memory");
    ne->ph_len = (uint32_t)placeholder_len;
    ne->name_len = (uint32_t)name_len;
    ne->used = false;
    /* appending in order (JSON objects usually are, generated names always) keeps the
     * array sorted without a later qsort */
    if (c->nnames == 0)
        c->names_sorted = true;
    else if (c->names_sorted && cmp_ph(c->names[c->nnames - 1].ph, c->names[c->nnames - 1].ph_len,
                                       ne->ph, ne->ph_len) >= 0)
        c->names_sorted = false;
    c->nnames++;
    c->has_names = true;
    return 0;
}

int expr_ctx_set_names_json(expr_ctx *c, const json_t *names, strata_err *err)
{
    if (!json_is_object(names))
        return strata_err_set(err, ERR_VALIDATION, "ExpressionAttributeNames must be a map");
    if (json_object_size(names) == 0)
        return strata_err_set(err, ERR_VALIDATION, "ExpressionAttributeNames must not be empty");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)names, key, val)
    {
        if (!json_is_string(val))
            return strata_err_set(err, ERR_SERIALIZATION,
                                  "ExpressionAttributeNames values must be strings");
        if (expr_ctx_add_name(c, key, strlen(key), json_string_value(val), json_string_length(val),
                              err) != 0)
            return -1;
    }
    return 0;
}

int expr_ctx_set_values(expr_ctx *c, const av *values, strata_err *err)
{
    if (values == NULL || values->type != AV_M)
        return strata_err_set(err, ERR_VALIDATION, "ExpressionAttributeValues must be a map");
    if (values->u.map.count == 0)
        return strata_err_set(err, ERR_VALIDATION, "ExpressionAttributeValues must not be empty");
    for (uint32_t i = 0; i < values->u.map.count; i++) {
        const av_attr *at = &values->u.map.attrs[i];
        int plen = at->name_len > 300 ? 300 : (int)at->name_len;
        if (at->name_len > EXPR_PLACEHOLDER_MAX)
            return strata_err_set(err, ERR_VALIDATION,
                                  "ExpressionAttributeValues contains invalid key: The expression "
                                  "attribute map contains a key that is too long; size of key: %u",
                                  at->name_len);
        if (!placeholder_ok(at->name, at->name_len, ':'))
            return strata_err_set(err, ERR_VALIDATION,
                                  "ExpressionAttributeValues contains invalid key: Syntax error; "
                                  "key: \"%.*s\"",
                                  plen, at->name);
    }
    c->value_used = arena_zalloc(c->a, values->u.map.count * sizeof(bool));
    if (c->value_used == NULL)
        return strata_err_set(err, ERR_NOMEM, "expression values: out of memory");
    c->values = values;
    c->has_values = true;
    return 0;
}

int expr_ctx_set_values_json(expr_ctx *c, const json_t *values, strata_err *err)
{
    if (!json_is_object(values))
        return strata_err_set(err, ERR_SERIALIZATION,
                              "Start of structure or map found where not expected.");
    size_t n = json_object_size(values);
    const char *key;
    json_t *val;
    /* keys first, as DynamoDB: a malformed placeholder wins over a malformed value */
    json_object_foreach((json_t *)values, key, val)
    {
        size_t klen = strlen(key);
        if (!placeholder_ok(key, klen, ':'))
            return strata_err_set(err, ERR_VALIDATION,
                                  "ExpressionAttributeValues contains invalid key: Syntax error; "
                                  "key: \"%.*s\"",
                                  klen > 300 ? 300 : (int)klen, key);
    }
    av *m = arena_zalloc(c->a, sizeof(av));
    av_attr *attrs = arena_zalloc(c->a, (n ? n : 1) * sizeof(av_attr));
    if (m == NULL || attrs == NULL)
        return strata_err_set(err, ERR_NOMEM, "expression values: out of memory");
    size_t i = 0;
    json_object_foreach((json_t *)values, key, val)
    {
        strata_err inner;
        size_t klen = strlen(key);
        if (ddbjson_to_value(val, c->a, &attrs[i].value, &inner) != 0) {
            if (inner.code != ERR_VALIDATION) {
                if (err != NULL)
                    *err = inner;
                return -1;
            }
            return strata_err_set(err, ERR_VALIDATION,
                                  "ExpressionAttributeValues contains invalid value: %s for key "
                                  "%.*s",
                                  inner.msg, klen > 300 ? 300 : (int)klen, key);
        }
        attrs[i].name = arena_strndup(c->a, key, klen);
        if (attrs[i].name == NULL)
            return strata_err_set(err, ERR_NOMEM, "expression values: out of memory");
        attrs[i].name_len = (uint32_t)klen;
        i++;
    }
    m->type = AV_M;
    m->u.map.attrs = attrs;
    m->u.map.count = (uint32_t)i;
    if (av_map_sort(m, err) != 0)
        return -1;
    return expr_ctx_set_values(c, m, err);
}

json_t *expr_ctx_names_json(const expr_ctx *c)
{
    if (c->nnames == 0)
        return NULL;
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    for (uint32_t i = 0; i < c->nnames; i++) {
        /* placeholders are ASCII identifiers, so NUL-terminated copies are exact */
        json_t *v = json_stringn(c->names[i].name, c->names[i].name_len);
        if (v == NULL || json_object_setn_new(o, c->names[i].ph, c->names[i].ph_len, v) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

const av *expr_ctx_values(const expr_ctx *c)
{
    return c->values;
}

bool expr_ctx_has_names(const expr_ctx *c)
{
    return c->has_names;
}

bool expr_ctx_has_values(const expr_ctx *c)
{
    return c->has_values;
}

static int cmp_name_entry(const void *x, const void *y)
{
    const name_entry *a = *(const name_entry *const *)x, *b = *(const name_entry *const *)y;
    uint32_t n = a->ph_len < b->ph_len ? a->ph_len : b->ph_len;
    int r = memcmp(a->ph, b->ph, n);
    if (r != 0)
        return r;
    return a->ph_len < b->ph_len ? -1 : a->ph_len > b->ph_len;
}

int expr_ctx_check_unused(const expr_ctx *c, strata_err *err)
{
    char list[STRATA_ERR_MSG_MAX];
    size_t used = 0;
    list[0] = '\0';
    uint32_t unused_names = 0;
    for (uint32_t i = 0; i < c->nnames; i++)
        unused_names += !c->names[i].used;
    if (unused_names) {
        const name_entry **v = arena_alloc(c->a, unused_names * sizeof(*v));
        if (v == NULL)
            return strata_err_set(err, ERR_NOMEM, "expression names: out of memory");
        uint32_t k = 0;
        for (uint32_t i = 0; i < c->nnames; i++)
            if (!c->names[i].used)
                v[k++] = &c->names[i];
        qsort(v, k, sizeof(*v), cmp_name_entry);
        for (uint32_t i = 0; i < k && used < sizeof(list); i++) {
            int n = snprintf(list + used, sizeof(list) - used, "%s%.*s", i ? ", " : "",
                             (int)v[i]->ph_len, v[i]->ph);
            if (n < 0)
                break;
            used += (size_t)n;
        }
        return strata_err_set(err, ERR_VALIDATION,
                              "Value provided in ExpressionAttributeNames unused in expressions: "
                              "keys: {%s}",
                              list);
    }
    if (c->values != NULL) {
        /* values->attrs are sorted by name already */
        bool any = false;
        for (uint32_t i = 0; i < c->values->u.map.count && used < sizeof(list); i++) {
            if (c->value_used[i])
                continue;
            const av_attr *at = &c->values->u.map.attrs[i];
            int n = snprintf(list + used, sizeof(list) - used, "%s%.*s", any ? ", " : "",
                             (int)at->name_len, at->name);
            if (n < 0)
                break;
            used += (size_t)n;
            any = true;
        }
        if (any)
            return strata_err_set(err, ERR_VALIDATION,
                                  "Value provided in ExpressionAttributeValues unused in "
                                  "expressions: keys: {%s}",
                                  list);
    }
    return 0;
}
