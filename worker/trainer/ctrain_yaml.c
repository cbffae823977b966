/*
 * ctrain_yaml.c - reads a two-level YAML configuration (sections of scalar keys, as
 * examples/pytorch/configs/temporal_encoder.yaml) with libyaml and hands every leaf to the
 * caller (ctrain_yaml.h). It knows no key: which keys exist and what they mean is the caller's
 * (ctrain_cfg.c). Not here: anchors' or tags' meaning (a leaf is its scalar text), deeper
 * nesting (an error naming the key).
 */
#include "ctrain_yaml.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <yaml.h>

/* Whether a plain scalar is YAML's null. */
static bool ctrain_yaml__is_null(const yaml_node_t *n)
{
    const char *v = (const char *)n->data.scalar.value;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

static int ctrain_yaml__walk(yaml_document_t *doc, const char *path, ctrain_yaml_leaf_fn fn,
                             void *ctx, ct_errbuf_t *eb)
{
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (root == NULL)
        return 0; /* an empty file: no keys */
    if (root->type != YAML_MAPPING_NODE)
        return ct_errbuf_set(eb, CT_EFORMAT, "%s: expected a mapping of sections at the top", path);
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (k->type != YAML_SCALAR_NODE)
            return ct_errbuf_set(eb, CT_EFORMAT, "%s: a section name is not a plain word", path);
        const char *sec = (const char *)k->data.scalar.value;
        if (v->type == YAML_SCALAR_NODE && ctrain_yaml__is_null(v))
            continue; /* "section:" with nothing under it */
        if (v->type != YAML_MAPPING_NODE)
            return ct_errbuf_set(eb, CT_EFORMAT, "%s: %s must be a mapping of keys", path, sec);
        for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top;
             q++) {
            yaml_node_t *kk = yaml_document_get_node(doc, q->key);
            yaml_node_t *vv = yaml_document_get_node(doc, q->value);
            if (kk->type != YAML_SCALAR_NODE)
                return ct_errbuf_set(eb, CT_EFORMAT, "%s: %s: a key is not a plain word", path,
                                     sec);
            const char *key = (const char *)kk->data.scalar.value;
            int rc;
            if (vv->type != YAML_SCALAR_NODE)
                rc = fn(ctx, sec, key, NULL, CTRAIN_YAML_NOT_SCALAR, eb);
            else if (ctrain_yaml__is_null(vv))
                rc = fn(ctx, sec, key, NULL, CTRAIN_YAML_NULL, eb);
            else
                rc = fn(ctx, sec, key, (const char *)vv->data.scalar.value,
                        vv->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? CTRAIN_YAML_PLAIN
                                                                         : CTRAIN_YAML_QUOTED,
                        eb);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

int ctrain_yaml_read(const char *path, ctrain_yaml_leaf_fn fn, void *ctx, ct_errbuf_t *eb)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct_errbuf_set(eb, -errno, "%s: %s", path, strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    int rc = 0;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return ct_errbuf_set(eb, -ENOMEM, "%s: out of memory for the YAML parser", path);
    }
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) {
        rc = ct_errbuf_set(eb, CT_EFORMAT, "%s:%zu:%zu: %s", path, parser.problem_mark.line + 1,
                           parser.problem_mark.column + 1,
                           parser.problem ? parser.problem : "not YAML");
    } else {
        rc = ctrain_yaml__walk(&doc, path, fn, ctx, eb);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}
