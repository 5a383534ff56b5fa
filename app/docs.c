/* docs.c - man page options and bash completion from the options table. */
#include "docs.h"

#include "options.h"

/* roff-escape: backslash and leading dots, hyphens as \- */
static void roff(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '\\')
            fputs("\\e", f);
        else if (*s == '-')
            fputs("\\-", f);
        else
            fputc(*s, f);
    }
}

static void cmds_list(FILE *f, unsigned cmds) {
    bool first = true;
    for (unsigned b = 1; b <= CMD_BENCH; b <<= 1)
        if (cmds & b) {
            fprintf(f, "%s%s", first ? "" : ", ", cmd_name(b));
            first = false;
        }
}

void docs_man_options(FILE *f) {
    fputs(".Bl -tag -width Ds\n", f);
    for (int i = 0; i < c3_noptions; i++) {
        const c3_option *o = &c3_options[i];
        fputs(".It", f);
        if (o->short_name) fprintf(f, " Fl %c ,", o->short_name);
        fputs(" Fl \\-", f);
        roff(f, o->name);
        if (o->type != OPT_FLAG && o->metavar) {
            fputs(" Ar ", f);
            roff(f, o->metavar);
        }
        fputc('\n', f);
        roff(f, o->help);
        fputs(".\n", f);
        if (o->def && *o->def && o->type != OPT_FLAG) {
            fputs("Default: ", f);
            roff(f, o->def);
            fputs(".\n", f);
        }
        if (o->aliases) {
            fputs("Also spelled\n", f);
            for (const char *p = o->aliases; *p;) {
                const char *e = strchr(p, ' ');
                int len = e ? (int)(e - p) : (int)strlen(p);
                char tmp[128];
                snprintf(tmp, sizeof tmp, "%.*s", len, p);
                fputs(".Fl \\-", f);
                roff(f, tmp);
                fputs(e ? " ,\n" : " .\n", f);
                if (!e) break;
                p = e + 1;
            }
        }
        fputs("Commands: ", f);
        cmds_list(f, option_cli_cmds(o));
        fputs(".\n", f);
    }
    fputs(".El\n", f);
}

/* The spellings of option o (--name, -x, --alias ...), joined by sep. */
static void spellings(FILE *f, const c3_option *o, const char *sep) {
    fprintf(f, "--%s", o->name);
    if (o->short_name) fprintf(f, "%s-%c", sep, o->short_name);
    if (o->aliases)
        for (const char *p = o->aliases; *p;) {
            const char *e = strchr(p, ' ');
            int len = e ? (int)(e - p) : (int)strlen(p);
            fprintf(f, "%s--%.*s", sep, len, p);
            if (!e) break;
            p = e + 1;
        }
}

void docs_man_environment(FILE *f) {
    fputs(".Bl -tag -width CUDA_VISIBLE_DEVICES\n", f);
    const char *name, *help;
    for (int i = 0; (name = c3_env_doc(i, &help)); i++)
        fprintf(f, ".It Ev %s\n%s", name, help);
    fputs(".El\n", f);
}

void docs_bash_completion(FILE *f, const char *const *commands, int ncommands) {
    fputs("# bash completion for cosmos3 -- generated from the options table by\n"
          "# `cosmos3 __completion`; do not edit (tests/test_docs.sh checks it).\n"
          "_cosmos3() {\n"
          "    local cur prev cmd i valued\n"
          "    cur=\"${COMP_WORDS[COMP_CWORD]}\"\n"
          "    prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
          "    valued=\"",
          f);
    bool first = true;
    for (int i = 0; i < c3_noptions; i++) {
        if (c3_options[i].type == OPT_FLAG) continue;
        if (!first) fputc(' ', f);
        spellings(f, &c3_options[i], " ");
        first = false;
    }
    fputs("\"\n"
          "    cmd=\"\"\n"
          "    # the command is the first word that is neither an option nor an option's value\n"
          "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
          "        case \"${COMP_WORDS[i]}\" in\n"
          "            -*) [[ \" $valued \" == *\" ${COMP_WORDS[i]} \"* ]] && ((i++)) ;;\n"
          "            *) cmd=\"${COMP_WORDS[i]}\"; break ;;\n"
          "        esac\n"
          "    done\n"
          "    if [[ -z \"$cmd\" ]]; then\n"
          "        COMPREPLY=($(compgen -W \"",
          f);
    for (int i = 0; i < ncommands; i++) fprintf(f, "%s%s", i ? " " : "", commands[i]);
    fputs(" help --help --version -V\" -- \"$cur\"))\n"
          "        return\n"
          "    fi\n"
          "    case \"$prev\" in\n",
          f);
    /* values of enum options, files and folders */
    for (int i = 0; i < c3_noptions; i++) {
        const c3_option *o = &c3_options[i];
        if (o->type == OPT_FLAG) continue;
        fputs("        ", f);
        spellings(f, o, "|");
        fputs(")\n", f);
        /* values only where the command takes the option */
        unsigned cmds = option_cli_cmds(o);
        int ncmd = 0;
        for (int c = 0; c < ncommands; c++)
            ncmd += (cmds & cmd_parse(commands[c])) != 0;
        if (ncmd < ncommands) {
            fputs("            [[ \"", f);
            for (int c = 0; c < ncommands; c++)
                if (cmds & cmd_parse(commands[c])) fprintf(f, " %s", commands[c]);
            fputs(" \" == *\" $cmd \"* ]] || return\n", f);
        }
        if (o->type == OPT_ENUM) {
            fputs("            COMPREPLY=($(compgen -W \"", f);
            for (const char *p = o->values; *p; p++) fputc(*p == '|' ? ' ' : *p, f);
            fputs("\" -- \"$cur\")); return ;;\n", f);
        } else if (!strcmp(o->name, "model")) { /* a folder, or the built-in demo */
            fputs("            COMPREPLY=($(compgen -d -- \"$cur\") $(compgen -W demo -- "
                  "\"$cur\")); return ;;\n",
                  f);
        } else if (o->type == OPT_STR && o->metavar &&
                   (!strcmp(o->metavar, "FILE") || !strcmp(o->metavar, "PATH") ||
                    !strcmp(o->metavar, "DIR") || option_takes_two(o))) {
            fputs("            COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n", f);
        } else {
            fputs("            return ;;\n", f);
        }
    }
    fputs("    esac\n    case \"$cmd\" in\n", f);
    for (int c = 0; c < ncommands; c++) {
        unsigned bit = cmd_parse(commands[c]);
        fprintf(f, "        %s) COMPREPLY=($(compgen -W \"", commands[c]);
        bool first = true;
        for (int i = 0; i < c3_noptions; i++) {
            const c3_option *o = &c3_options[i];
            if (!(option_cli_cmds(o) & bit)) continue;
            fprintf(f, "%s--%s", first ? "" : " ", o->name);
            first = false;
        }
        fputs(" --help\" -- \"$cur\"));", f);
        if (!strcmp(commands[c], "meta")) fputs(" [[ $cur != -* ]] && COMPREPLY=($(compgen -f -- \"$cur\"));", f);
        fputs(" ;;\n", f);
    }
    fputs("        help) COMPREPLY=($(compgen -W \"", f);
    for (int i = 0; i < ncommands; i++) fprintf(f, "%s%s", i ? " " : "", commands[i]);
    fputs("\" -- \"$cur\")) ;;\n    esac\n}\ncomplete -o default -F _cosmos3 cosmos3\n", f);
}
