#ifndef STRATA_BASE_ERR_H
#define STRATA_BASE_ERR_H
/*
 * Errors are values: a code naming the error class and a message a person can act on.
 *
 * Convention for every fallible function in Strata: it takes `strata_err *err` as its
 * last argument, returns 0 (or a non-NULL pointer) on success, and on failure fills
 * `err` and returns -1 (or NULL). `err` may be NULL when the caller only needs the
 * outcome. Codes that name a DynamoDB error type carry DynamoDB's own message text, so
 * the API layer can pass them to the client unchanged.
 */
#include <stdarg.h>
#include <stddef.h>

typedef enum {
    ERR_NONE = 0,
    /* DynamoDB error types (client errors, HTTP 400 unless noted). */
    ERR_VALIDATION,              /* ValidationException */
    ERR_SERIALIZATION,           /* SerializationException: body is not the expected JSON */
    ERR_CONDITIONAL_CHECK,       /* ConditionalCheckFailedException */
    ERR_RESOURCE_NOT_FOUND,      /* ResourceNotFoundException */
    ERR_RESOURCE_IN_USE,         /* ResourceInUseException */
    ERR_LIMIT_EXCEEDED,          /* LimitExceededException */
    ERR_THROUGHPUT_EXCEEDED,     /* ProvisionedThroughputExceededException */
    ERR_REQUEST_LIMIT,           /* RequestLimitExceeded */
    ERR_THROTTLING,              /* ThrottlingException */
    ERR_ITEM_COLLECTION_SIZE,    /* ItemCollectionSizeLimitExceededException */
    ERR_TRANSACTION_CANCELED,    /* TransactionCanceledException */
    ERR_TRANSACTION_CONFLICT,    /* TransactionConflictException */
    ERR_TRANSACTION_IN_PROGRESS, /* TransactionInProgressException */
    ERR_IDEMPOTENT_MISMATCH,     /* IdempotentParameterMismatchException */
    ERR_MISSING_AUTH,            /* MissingAuthenticationTokenException */
    ERR_UNRECOGNIZED_CLIENT,     /* UnrecognizedClientException */
    ERR_INCOMPLETE_SIGNATURE,    /* IncompleteSignatureException */
    ERR_ACCESS_DENIED,           /* AccessDeniedException */
    ERR_UNKNOWN_OPERATION,       /* UnknownOperationException */
    ERR_INTERNAL,                /* InternalServerError, HTTP 500 */
    ERR_UNAVAILABLE,             /* ServiceUnavailable, HTTP 503 (retryable) */
    /* Internal classes; the API layer reports them as InternalServerError. */
    ERR_IO,        /* a system call failed; message has the path and errno text */
    ERR_CORRUPT,   /* checksum or format mismatch in stored or received bytes */
    ERR_NOMEM,     /* allocation failed or a configured memory bound was hit */
    ERR_NOT_FOUND, /* an internal lookup found nothing (not a DynamoDB error) */
    ERR_BUSY,      /* back-pressure: try again later */
    ERR_NEWER,     /* bytes of a newer binary's format, which this one cannot read */
    ERR_CODE_COUNT
} strata_code;

#define STRATA_ERR_MSG_MAX 1024

typedef struct {
    strata_code code;
    char msg[STRATA_ERR_MSG_MAX];
} strata_err;

/* Fills `err` (if not NULL) and returns -1, so callers can `return strata_err_set(...)`. */
int strata_err_set(strata_err *err, strata_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int strata_err_setv(strata_err *err, strata_code code, const char *fmt, va_list ap);

/* Resets `err` to ERR_NONE with an empty message. */
void strata_err_clear(strata_err *err);

/* The short name of a code, e.g. "ValidationException" or "IoError". Never NULL. */
const char *strata_code_name(strata_code code);

#endif
