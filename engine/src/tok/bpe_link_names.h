/* The link names of the BPE tokenizer's functions shared between its files (bpe_impl.h):
 * everything libdse exports carries the dse_/dse__ prefix (tests/check-dse-symbols.sh),
 * so a program linking libdse never meets a bare bpe_ or bj_ name of ours. The sources
 * keep the short names. */
#ifndef DSE_BPE_LINK_NAMES_H
#define DSE_BPE_LINK_NAMES_H

#define bj_free dse__bj_free
#define bj_get dse__bj_get
#define bj_get_bool dse__bj_get_bool
#define bj_get_str dse__bj_get_str
#define bj_parse dse__bj_parse
#define bj_root dse__bj_root
#define bpe_buf_done dse__bpe_buf_done
#define bpe_buf_put dse__bpe_buf_put
#define bpe_buf_reserve dse__bpe_buf_reserve
#define bpe_byte_to_cp dse__bpe_byte_to_cp
#define bpe_cp_to_byte dse__bpe_cp_to_byte
#define bpe_decode dse__bpe_decode
#define bpe_is_whitespace dse__bpe_is_whitespace
#define bpe_map dse__bpe_map
#define bpe_merge_insert dse__bpe_merge_insert
#define bpe_merge_insert_batch dse__bpe_merge_insert_batch
#define bpe_model_encode dse__bpe_model_encode
#define bpe_normalize dse__bpe_normalize
#define bpe_normalize_string dse__bpe_normalize_string
#define bpe_pretokenize dse__bpe_pretokenize
#define bpe_regex_compile dse__bpe_regex_compile
#define bpe_regex_compile_literal dse__bpe_regex_compile_literal
#define bpe_regex_done dse__bpe_regex_done
#define bpe_regex_find dse__bpe_regex_find
#define bpe_unmap dse__bpe_unmap
#define bpe_utf8_encode dse__bpe_utf8_encode
#define bpe_utf8_next dse__bpe_utf8_next
#define bpe_utf8_valid_avx2 dse__bpe_utf8_valid_avx2
#define bpe_utf8_valid_prefix dse__bpe_utf8_valid_prefix
#define bpe_utf8_valid_prefix_ref dse__bpe_utf8_valid_prefix_ref
#define bpe_vocab_find dse__bpe_vocab_find
#define bpe_vocab_find_batch dse__bpe_vocab_find_batch
#define bpe_vocab_insert dse__bpe_vocab_insert
#define bpe_vocab_insert_batch dse__bpe_vocab_insert_batch
#define bpe_ws_done dse__bpe_ws_done
#define bpe_ws_init dse__bpe_ws_init

#endif
