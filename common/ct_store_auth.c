/*
 * ct_store_auth.c - HMAC-SHA256 proofs and nonces for store authentication, on libcrypto.
 */
#include "ct_store_auth.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

static const char ct_store_auth__label_client[] = "ctrun-store-auth-v1 client";
static const char ct_store_auth__label_server[] = "ctrun-store-auth-v1 server";

int ct_store_auth_nonce(uint8_t nonce[CT_STORE_AUTH_NONCE_LEN], ct_errbuf_t *eb)
{
    if (RAND_bytes(nonce, CT_STORE_AUTH_NONCE_LEN) != 1)
        return ct_errbuf_set(eb, CT_EAUTH, "RAND_bytes failed: %s",
                             ERR_reason_error_string(ERR_get_error()));
    return 0;
}

int ct_store_auth_mac(const void *token, size_t token_len, bool from_server,
                      const uint8_t client_nonce[CT_STORE_AUTH_NONCE_LEN],
                      const uint8_t server_nonce[CT_STORE_AUTH_NONCE_LEN],
                      uint8_t mac[CT_STORE_AUTH_MAC_LEN], ct_errbuf_t *eb)
{
    const char *label = from_server ? ct_store_auth__label_server : ct_store_auth__label_client;
    size_t label_len = strlen(label);
    uint8_t msg[sizeof ct_store_auth__label_client + 2 * CT_STORE_AUTH_NONCE_LEN];
    memcpy(msg, label, label_len);
    memcpy(msg + label_len, client_nonce, CT_STORE_AUTH_NONCE_LEN);
    memcpy(msg + label_len + CT_STORE_AUTH_NONCE_LEN, server_nonce, CT_STORE_AUTH_NONCE_LEN);
    unsigned int mac_len = 0;
    if (HMAC(EVP_sha256(), token, (int)token_len, msg, label_len + 2 * CT_STORE_AUTH_NONCE_LEN, mac,
             &mac_len) == NULL ||
        mac_len != CT_STORE_AUTH_MAC_LEN)
        return ct_errbuf_set(eb, CT_EAUTH, "HMAC-SHA256 failed: %s",
                             ERR_reason_error_string(ERR_get_error()));
    return 0;
}

bool ct_store_auth_mac_equal(const uint8_t a[CT_STORE_AUTH_MAC_LEN],
                             const uint8_t b[CT_STORE_AUTH_MAC_LEN])
{
    return CRYPTO_memcmp(a, b, CT_STORE_AUTH_MAC_LEN) == 0;
}

int ct_store_auth_check_token(const char *token, const char *source, ct_errbuf_t *eb)
{
    if (token == NULL || token[0] == '\0')
        return ct_errbuf_set(eb, CT_EPARSE, "%s: the store token is empty", source);
    size_t n = strlen(token);
    if (n > CT_STORE_TOKEN_MAX)
        return ct_errbuf_set(eb, CT_ELIMIT, "%s: the store token is %zu bytes (at most %d)", source,
                             n, CT_STORE_TOKEN_MAX);
    return 0;
}
