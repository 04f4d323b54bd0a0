/*
 * task_gen.h -- the task generators' table (engine/text/task_gen.c), for the
 * command line (`headprune task`: each generator's name, summary and help)
 * and for tests (the IOI templates and word lists a row must come from).
 */
#ifndef HP_TASK_GEN_H
#define HP_TASK_GEN_H

#include "headprune.h"

#define HP_TASK_INDUCTION_LEN 32 /* random tokens in a half by default (cut to what the model holds) */
#define HP_TASK_IOI_MIN_NAMES 4  /* the fewest one-token names ioi works with */
#define HP_TASK_IOI_TEMPLATES 8  /* hp_ioi_templates' templates */

struct hp_task_gen_row {
    const char *name;    /* as `headprune task NAME` and messages take it */
    const char *summary; /* one line, in the list of generators */
    const char *help;    /* what it makes, for `headprune task NAME --help` ('\n' breaks a line) */
    bool takes_len;      /* --len K */
    bool takes_templ;    /* --template K */
    enum hp_status (*run)(const char *dir, const struct hp_task_gen_opts *o,
                          bool (*row)(void *user, const char *line, size_t n), void *user, struct hp_error *err);
};

/* HP_TASK_GEN_COUNT rows (unsized here, so that task_gen.c's static_assert counts the rows it writes) */
extern const struct hp_task_gen_row hp_task_gens[];

/* The generator called name, or NULL. */
const struct hp_task_gen_row *hp_task_gen_named(const char *name);

/*
 * IOI's templates: text with the slots {A} and {B} (the two names of the
 * first clause), {S} (the second mention of the subject), {P} (a place) and
 * {O} (an object); every template ends where the indirect object comes next.
 */
extern const char *const hp_ioi_templates[]; /* HP_TASK_IOI_TEMPLATES of them: unsized, so task_gen.c's static_assert counts them */
/* IOI's words, each list NULL-terminated: those one token (with a leading space) in the tokenizer are used. */
extern const char *const hp_ioi_names[], *const hp_ioi_places[], *const hp_ioi_objects[];

/*
 * docstring's prompt: {F} the function's name, {A1}..{A4} its parameters
 * after self, {P1} {P2} the two the docstring documents (the clean A1, A2, in
 * the corrupt prompt too), {D1}..{D7} words of the descriptions; it ends at
 * ":param", where the third parameter comes next. Its words, NULL-terminated: those one token
 * (with a leading space) in the tokenizer are used.
 */
extern const char hp_docstring_template[];
extern const char *const hp_docstring_words[];
#define HP_TASK_DOCSTRING_MIN_WORDS 16 /* the fewest one-token words docstring works with */

#endif
