/*
 * ct_store_auth.h - the cryptography of ctrun's optional store authentication.
 *
 * Owns: nonce generation, the two HMAC-SHA256 proofs of the challenge-response exchange that
 * ct_store_codec.h lays out on the wire, their constant-time comparison, and where a token
 * comes from (CTRUN_STORE_TOKEN). Everything cryptographic is OpenSSL's libcrypto; nothing
 * here is hand-written crypto.
 *
 * Not here: the message bytes (ct_store_codec.h) or when the exchange happens (the server and
 * the client). The exchange proves that both ends hold the token; it does not encrypt the
 * connection or protect it against an active man in the middle, and stock PyTorch clients
 * cannot perform it, which is why it is off unless a token is configured.
 */
#ifndef CT_STORE_AUTH_H
#define CT_STORE_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_error.h"
#include "ct_store_codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The environment variable a token is read from when no option gives one. */
#define CT_STORE_TOKEN_ENV "CTRUN_STORE_TOKEN"

/* Longest accepted token, in bytes. */
#define CT_STORE_TOKEN_MAX 4096

/* Fills nonce with cryptographically random bytes (RAND_bytes). */
int ct_store_auth_nonce(uint8_t nonce[CT_STORE_AUTH_NONCE_LEN], ct_errbuf_t *eb);

/* The proof one side sends: HMAC-SHA256(token, label | client_nonce | server_nonce), with a
 * different label for the client's PROOF and the server's ACCEPT so that neither can be
 * replayed as the other. */
int ct_store_auth_mac(const void *token, size_t token_len, bool from_server,
                      const uint8_t client_nonce[CT_STORE_AUTH_NONCE_LEN],
                      const uint8_t server_nonce[CT_STORE_AUTH_NONCE_LEN],
                      uint8_t mac[CT_STORE_AUTH_MAC_LEN], ct_errbuf_t *eb);

/* Constant-time comparison of two MACs. */
bool ct_store_auth_mac_equal(const uint8_t a[CT_STORE_AUTH_MAC_LEN],
                             const uint8_t b[CT_STORE_AUTH_MAC_LEN]);

/* Validates a token given by a user: non-empty and at most CT_STORE_TOKEN_MAX bytes. `source`
 * names where it came from in the message ("--token", "CTRUN_STORE_TOKEN"). */
int ct_store_auth_check_token(const char *token, const char *source, ct_errbuf_t *eb);

#ifdef __cplusplus
}
#endif

#endif /* CT_STORE_AUTH_H */
