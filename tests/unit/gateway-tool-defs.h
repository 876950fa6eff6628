/* gateway-tool-defs.h — the function definitions and chat body the tool_choice tests
 * (test-gateway-tool-choice.c, test-gateway-tool-syntax.c) send: a strict function with a
 * bounded string and an enum, one whose arguments are $ref'd integers with a minimum,
 * and one without parameters. */
#ifndef DSV_TEST_GATEWAY_TOOL_DEFS_H
#define DSV_TEST_GATEWAY_TOOL_DEFS_H

#define WEATHER                                                                                                      \
        "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"strict\":true,\"parameters\":{"            \
        "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},"                        \
        "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}}}"
#define ADD                                                                                                          \
        "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\","                 \
        "\"$defs\":{\"n\":{\"type\":\"integer\",\"minimum\":0}},\"properties\":{\"a\":{\"$ref\":\"#/$defs/n\"},"       \
        "\"b\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"a\",\"b\"],\"additionalProperties\":false}}}"
#define NOARGS "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}"
#define CHAT(extra) "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[" extra "}"

#endif
