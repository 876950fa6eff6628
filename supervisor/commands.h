/* The dsvisor subcommands. Each returns the process exit status (0 ok, 1 error, 2 usage)
 * and prints its own errors; only main() exits. */
#ifndef DSV_COMMANDS_H
#define DSV_COMMANDS_H

struct dsv_command {
        const char *name;
        int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
        const char *summary;
};

int dsv_cmd_cpuinfo(int argc, char **argv);
int dsv_cmd_tokenize(int argc, char **argv);
int dsv_cmd_convert(int argc, char **argv);
int dsv_cmd_verify(int argc, char **argv);
int dsv_cmd_plan(int argc, char **argv);
int dsv_cmd_doctor(int argc, char **argv);
int dsv_cmd_logits(int argc, char **argv);
int dsv_cmd_run(int argc, char **argv);
int dsv_cmd_start(int argc, char **argv);
int dsv_cmd_status(int argc, char **argv);
int dsv_cmd_stop(int argc, char **argv);
int dsv_cmd_grammar(int argc, char **argv);

/* Loads the tokenizer of --tokenizer FILE (tok_path) or else of --model M (cmd_tokenize.c);
 * prints why it failed. */
struct dse_tokenizer;
int dsv_tokenizer_load_arg(const char *model_arg, const char *tok_path, struct dse_tokenizer **ret_tok);

#endif
