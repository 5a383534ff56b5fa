/* hf_cache.c - Hugging Face model ids from the local cache (hf_cache.h). */
#include "hf_cache.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

bool hf_is_model_id(const char *m) {
    if (!m || !*m || is_dir(m) || m[0] == '.' || m[0] == '/') return false;
    int slashes = 0;
    for (const char *p = m; *p; p++) {
        if (*p == '/') {
            if (p == m || !p[1] || p[1] == '/') return false;
            slashes++;
        } else if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') {
            return false;
        }
    }
    return slashes == 1;
}

/* The hub cache folder and which variable named it. */
static void hub_dir(char *out, size_t n, const char **from) {
    const char *v;
    if ((v = getenv("HF_HUB_CACHE")) && *v) {
        snprintf(out, n, "%s", v);
        *from = "HF_HUB_CACHE";
    } else if ((v = getenv("HUGGINGFACE_HUB_CACHE")) && *v) {
        snprintf(out, n, "%s", v);
        *from = "HUGGINGFACE_HUB_CACHE";
    } else if ((v = getenv("HF_HOME")) && *v) {
        snprintf(out, n, "%s/hub", v);
        *from = "HF_HOME";
    } else if ((v = getenv("XDG_CACHE_HOME")) && *v) {
        snprintf(out, n, "%s/huggingface/hub", v);
        *from = "XDG_CACHE_HOME";
    } else {
        snprintf(out, n, "%s/.cache/huggingface/hub", getenv("HOME") ? getenv("HOME") : "");
        *from = "the default";
    }
}

static bool is_commit(const char *r) {
    if (strlen(r) != 40) return false;
    for (const char *p = r; *p; p++)
        if (!isxdigit((unsigned char)*p)) return false;
    return true;
}

int hf_resolve(const char *id, const char *revision, char *out, size_t n) {
    const char *rev = revision && *revision ? revision : "main";
    if (strstr(rev, "..") || strchr(rev, '\n'))
        return c3_fail(COSMOS3_EUSAGE, "--revision '%s' is not a branch, tag or commit", rev);
    char hub[4096], repo[4400], path[8192];
    const char *from;
    hub_dir(hub, sizeof hub, &from);
    const char *slash = strchr(id, '/'); /* models--org--name */
    snprintf(repo, sizeof repo, "%s/models--%.*s--%s", hub, (int)(slash - id), id, slash + 1);
    if (!is_dir(repo))
        return c3_fail(
            COSMOS3_EMODEL,
            "model %s is not in the Hugging Face cache (%s, from %s); cosmos3 fetches "
            "nothing: download it with 'huggingface-cli download %s%s%s', or pass -m DIR",
            id, hub, from, id, revision ? " --revision " : "", revision ? revision : "");
    char commit[128] = "";
    snprintf(path, sizeof path, "%s/refs/%s", repo, rev);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(commit, sizeof commit, f)) commit[0] = 0;
        fclose(f);
        commit[strcspn(commit, " \r\n")] = 0;
    } else if (is_commit(rev)) {
        snprintf(commit, sizeof commit, "%s", rev);
    }
    if (!commit[0] || strchr(commit, '/'))
        return c3_fail(COSMOS3_EMODEL,
                       "model %s: revision '%s' is not in the Hugging Face cache (%s has no "
                       "refs/%s); download it with 'huggingface-cli download %s --revision %s'",
                       id, rev, repo, rev, id, rev);
    snprintf(path, sizeof path, "%s/snapshots/%s", repo, commit);
    if (!is_dir(path))
        return c3_fail(COSMOS3_EMODEL,
                       "model %s at %s: the snapshot %s is missing (an interrupted download?); "
                       "download it again with 'huggingface-cli download %s%s%s'",
                       id, rev, path, id, revision ? " --revision " : "", revision ? revision : "");
    if ((size_t)snprintf(out, n, "%s", path) >= n)
        return c3_fail(COSMOS3_EMODEL, "model %s: the cache path is too long", id);
    return COSMOS3_OK;
}

int hf_check_class(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model_index.json", dir);
    json_error_t err;
    json_t *o = json_load_file(path, 0, &err);
    if (!o)
        return c3_fail(COSMOS3_EMODEL, "--model-class-name: cannot read %s (%s)", path, err.text);
    const char *cls = json_string_value(json_object_get(o, "_class_name"));
    char want[256] = "";
    if (cls) snprintf(want, sizeof want, "%s", cls);
    json_decref(o);
    if (!want[0])
        return c3_fail(COSMOS3_EMODEL, "--model-class-name %s: %s has no _class_name", name, path);
    if (!strcmp(name, want)) return COSMOS3_OK;
    /* vLLM-Omni's pipeline class for a Diffusers pipeline: XDiffusersPipeline for XPipeline */
    char omni[300] = "";
    size_t L = strlen(want);
    if (L > 8 && !strcmp(want + L - 8, "Pipeline"))
        snprintf(omni, sizeof omni, "%.*sDiffusersPipeline", (int)(L - 8), want);
    if (omni[0] && !strcmp(name, omni)) return COSMOS3_OK;
    return c3_fail(COSMOS3_EMODEL,
                   "--model-class-name %s does not match the checkpoint: %s says _class_name "
                   "%s%s%s%s; drop the option or give that name",
                   name, path, want, omni[0] ? " (vLLM-Omni: " : "", omni, omni[0] ? ")" : "");
}
