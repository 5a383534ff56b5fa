/* test_e2e.c - the five upstream end-to-end runs through the real CLI:
 * `cosmos3 gen --noise latents_init ... --save-latents` must give the
 * golden final latents (relative L2 <= 1e-3, the fixtures README's float32
 * suggestion for six steps) and the golden uint8 frames (equal on >= 99.9 %
 * of values, within 1 level everywhere). Cases and flags come from
 * manifest.json, so a held-out fixture set runs the same way. */
#include <jansson.h>

#include "test_cli.h"

int main(void) {
    const char *fx = t_need_fixtures("e2e");
    const char *bin = t_need_bin("e2e");
    char path[4096];
    snprintf(path, sizeof path, "%s/tiny-a/golden/manifest.json", fx);
    json_error_t je;
    json_t *man = json_load_file(path, 0, &je);
    T_CHECK(man != NULL, "manifest: %s", je.text);
    if (!man) return t_done("e2e");
    json_t *cases = json_object_get(json_object_get(json_object_get(man, "sections"), "e2e"), "cases");
    st_file g;
    t_open_golden(&g, "tiny-a/golden/e2e.safetensors");
    char model[4096];
    snprintf(model, sizeof model, "%s/tiny-a/model", fx);
    char tmpd[] = "/tmp/c3_e2e_XXXXXX";
    T_CHECK(mkdtemp(tmpd) != NULL, "mkdtemp");
    size_t ci;
    json_t *c;
    json_array_foreach(cases, ci, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *fl = json_object_get(c, "flags");
        char key[256], noise[4200], lat[4200], png[4200];
        snprintf(key, sizeof key, "%s.latents_init", name);
        snprintf(noise, sizeof noise, "%s/%s.noise.safetensors", tmpd, name);
        snprintf(lat, sizeof lat, "%s/%s.out.safetensors", tmpd, name);
        t_golden_noise(&g, key, noise);
        int frames = (int)json_integer_value(json_object_get(fl, "num_frames"));
        if (frames > 1)
            snprintf(png, sizeof png, "%s/%s_frames", tmpd, name);
        else
            snprintf(png, sizeof png, "%s/%s.png", tmpd, name);
        char W[16], H[16], F[16], fps[32], steps[16], gs[32], shift[32];
        snprintf(W, sizeof W, "%lld", (long long)json_integer_value(json_object_get(fl, "width")));
        snprintf(H, sizeof H, "%lld", (long long)json_integer_value(json_object_get(fl, "height")));
        snprintf(F, sizeof F, "%d", frames);
        snprintf(fps, sizeof fps, "%g", json_number_value(json_object_get(fl, "fps")));
        snprintf(steps, sizeof steps, "%lld", (long long)json_integer_value(json_object_get(fl, "num_inference_steps")));
        snprintf(gs, sizeof gs, "%g", json_number_value(json_object_get(fl, "guidance_scale")));
        snprintf(shift, sizeof shift, "%g", json_number_value(json_object_get(fl, "flow_shift")));
        bool karras = json_is_true(json_object_get(fl, "use_karras_sigmas"));
        bool native = json_is_true(json_object_get(fl, "use_native_flow_schedule"));
        const char *sched = karras ? "karras" : native ? "native" : "linear";
        const char *sys = json_is_false(json_object_get(fl, "use_system_prompt")) ? "off" : "on";
        const char *tmpl = json_is_false(json_object_get(fl, "add_resolution_template")) ? "--no-templates" : "--templates";
        char *argv[] = {(char *)bin,
                        "gen",
                        "-m",
                        model,
                        "-p",
                        (char *)json_string_value(json_object_get(fl, "prompt")),
                        "-n",
                        (char *)json_string_value(json_object_get(fl, "negative_prompt")),
                        "-W",
                        W,
                        "-H",
                        H,
                        "--frames",
                        F,
                        "--fps",
                        fps,
                        "--steps",
                        steps,
                        "-g",
                        gs,
                        "--shift",
                        shift,
                        "--schedule",
                        (char *)sched,
                        "--guidance-interval",
                        "none",
                        "--system-prompt",
                        (char *)sys,
                        (char *)tmpl,
                        "--noise",
                        noise,
                        "--save-latents",
                        lat,
                        "-o",
                        png,
                        "--overwrite",
                        "-q",
                        "--device",
                        (char *)t_device(),
                        NULL};
        double t0 = c3_now();
        int rc = t_run(argv, NULL);
        T_CHECK(rc == 0, "%s: cosmos3 gen exited %d", name, rc);
        if (rc) continue;
        /* latents */
        st_file o;
        T_CHECK(st_open(&o, lat) == C3_OK, "%s: %s", name, c3_errmsg());
        snprintf(key, sizeof key, "%s.latents_final", name);
        int64_t n = 0;
        float *ref = t_golden_f32(&g, key, &n);
        const st_tensor *ot = st_find(&o, "latents");
        T_CHECK(ot && st_numel(ot) == n, "%s: saved latents shape", name);
        if (ot && st_numel(ot) == n) {
            float *x = st_to_f32(ot);
            double e = t_rel_l2(x, ref, n);
            fprintf(stderr, "%s: final latents rel L2 %.3e (%.1f s)\n", name, e, c3_now() - t0);
            T_CHECK(e <= t_tol_latents(), "%s: final latents rel L2 %.3e > %.0e", name, e,
                    t_tol_latents());
            free(x);
        }
        free(ref);
        st_close(&o);
        /* frames */
        snprintf(key, sizeof key, "%s.frames_uint8", name);
        t_check_frames(&g, key, name, png, frames > 1, t_bf16());
    }
    st_close(&g);
    json_decref(man);
    T_CHECK(t_rm_tree(tmpd), "cleanup");
    return t_done("e2e");
}
