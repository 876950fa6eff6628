# cmake -DIN=FILE -DOUT=FILE.c -DNAME=symbol -P EmbedFile.cmake: writes a C file defining
# `const unsigned char NAME[]` (the bytes of IN, then a NUL) and `const size_t NAME_len`
# (without the NUL), so a text asset such as an HTML page stays editable as itself and
# still ships inside the binary.
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}.tmp" "/* Generated from ${IN} by cmake/EmbedFile.cmake; edit that file instead. */\n"
     "#include <stddef.h>\n"
     "const unsigned char ${NAME}[] = {\n${bytes}0x00};\n"
     "const size_t ${NAME}_len = sizeof ${NAME} - 1;\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
