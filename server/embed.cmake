# cmake -DIN=file -DOUT=file.c -P embed.cmake: writes IN's bytes as the C array
# srv_openapi_json (and its length srv_openapi_json_len) into OUT.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR n "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT} "/* generated from server/openapi.json by server/embed.cmake */\n#include <stddef.h>\n"
     "const unsigned char srv_openapi_json[] = {\n${bytes}0x00};\nconst size_t srv_openapi_json_len = ${n};\n")
