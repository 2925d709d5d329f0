/*
 * Tokenizer for DynamoDB expressions. The whole text (at most EXPR_TEXT_MAX bytes) is
 * split up front, so the parser can look back and ahead freely and syntax errors can
 * quote the neighbouring tokens the way DynamoDB does.
 */
#include <stdio.h>
#include <string.h>

#include "storage/expr/expr_int.h"

/* A bare attribute name starts with a letter ("_x" is a syntax error at "_", as in
 * DynamoDB); later characters may be letters, digits or '_'. */
static bool is_ident_start(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static bool is_ident_part(char ch)
{
    return is_ident_start(ch) || (ch >= '0' && ch <= '9') || ch == '_';
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/* Length of the UTF-8 sequence starting with byte `b` (1 for invalid bytes). */
static uint32_t utf8_len(unsigned char b)
{
    if (b >= 0xF0 && b <= 0xF4)
        return 4;
    if (b >= 0xE0)
        return b <= 0xEF ? 3 : 1;
    if (b >= 0xC2)
        return 2;
    return 1;
}

/* Recognizes one token at text[i]; sets its type and length. */
static void scan_one(const char *text, size_t len, size_t i, token *t)
{
    char ch = text[i];
    size_t j = i + 1;
    t->off = (uint32_t)i;
    t->type = T_BAD;
    if (is_ident_start(ch)) {
        while (j < len && is_ident_part(text[j]))
            j++;
        t->type = T_IDENT;
    } else if (ch >= '0' && ch <= '9') {
        while (j < len && text[j] >= '0' && text[j] <= '9')
            j++;
        t->type = T_NUMBER;
    } else if (ch == '#' || ch == ':') {
        while (j < len && is_ident_part(text[j]))
            j++;
        if (j > i + 1)
            t->type = ch == '#' ? T_NAME : T_VALUE;
    } else {
        switch (ch) {
        case '(':
            t->type = T_LPAREN;
            break;
        case ')':
            t->type = T_RPAREN;
            break;
        case '[':
            t->type = T_LBRACK;
            break;
        case ']':
            t->type = T_RBRACK;
            break;
        case ',':
            t->type = T_COMMA;
            break;
        case '.':
            t->type = T_DOT;
            break;
        case '+':
            t->type = T_PLUS;
            break;
        case '-':
            t->type = T_MINUS;
            break;
        case '=':
            t->type = T_EQ;
            break;
        case '<':
            t->type = T_LT;
            if (j < len && text[j] == '=') {
                t->type = T_LE;
                j++;
            } else if (j < len && text[j] == '>') {
                t->type = T_NE;
                j++;
            }
            break;
        case '>':
            t->type = T_GT;
            if (j < len && text[j] == '=') {
                t->type = T_GE;
                j++;
            }
            break;
        default: {
            size_t n = utf8_len((unsigned char)ch);
            j = i + n <= len ? i + n : len;
            break;
        }
        }
    }
    t->len = (uint32_t)(j - i);
}

token *expr_tokenize(arena *a, const char *text, size_t len, uint32_t *count)
{
    /* Every token but EOF consumes at least one byte. */
    token *toks = arena_alloc(a, (len + 1) * sizeof(token));
    if (toks == NULL)
        return NULL;
    uint32_t n = 0;
    size_t i = 0;
    for (;;) {
        while (i < len && is_space(text[i]))
            i++;
        if (i >= len)
            break;
        scan_one(text, len, i, &toks[n]);
        i += toks[n].len;
        n++;
    }
    toks[n].type = T_EOF;
    toks[n].off = (uint32_t)len;
    toks[n].len = 0;
    *count = n + 1;
    return toks;
}

bool expr_tok_is_kw(const char *text, const token *t, const char *kw)
{
    size_t n = strlen(kw);
    if (t->type != T_IDENT || t->len != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = text[t->off + i];
        if (ch >= 'a' && ch <= 'z')
            ch = (char)(ch - 'a' + 'A');
        if (ch != kw[i])
            return false;
    }
    return true;
}

void expr_path_format(const expr_path *p, char *out, size_t cap)
{
    size_t used = 0;
    int n = snprintf(out, cap, "[");
    used = n > 0 ? (size_t)n : 0;
    for (uint32_t i = 0; i < p->count && used < cap; i++) {
        const path_elem *e = &p->elems[i];
        const char *sep = i ? ", " : "";
        if (e->name != NULL)
            n = snprintf(out + used, cap - used, "%s%.*s", sep, (int)e->len, e->name);
        else
            n = snprintf(out + used, cap - used, "%s[%u]", sep, e->index);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    if (used < cap)
        snprintf(out + used, cap - used, "]");
}

path_relation expr_path_relation(const expr_path *a, const expr_path *b)
{
    uint32_t n = a->count < b->count ? a->count : b->count;
    for (uint32_t i = 0; i < n; i++) {
        const path_elem *x = &a->elems[i], *y = &b->elems[i];
        if ((x->name == NULL) != (y->name == NULL))
            return PATHS_CONFLICT;
        if (x->name != NULL) {
            if (x->len != y->len || memcmp(x->name, y->name, x->len) != 0)
                return PATHS_DISJOINT;
        } else if (x->index != y->index) {
            return PATHS_DISJOINT;
        }
    }
    return PATHS_OVERLAP;
}

const char *expr_kind_prefix(expr_kind kind)
{
    switch (kind) {
    case EXPR_CONDITION:
        return "Invalid ConditionExpression: ";
    case EXPR_FILTER:
        return "Invalid FilterExpression: ";
    case EXPR_KEY_CONDITION:
        return "Invalid KeyConditionExpression: ";
    case EXPR_PROJECTION:
        return "Invalid ProjectionExpression: ";
    case EXPR_UPDATE:
        return "Invalid UpdateExpression: ";
    }
    return "Invalid Expression: ";
}
