# cmake -DCKPT_CLI=PATH -DCKPT_DOCS_DIR=DIR -P docs.cmake: the man page and
# the shell completions, written by the CLI from the same option tables as
# `ckpt help`: DIR/ckpt.1, DIR/completion/ckpt (bash), DIR/completion/_ckpt
# (zsh). Each is written beside its place and renamed there once the CLI
# succeeded, so a failed run leaves no partial page. Included by the
# install step too, which writes those missing or older than the CLI (a
# build of only some targets, such as `--target ckpt`, has none).
if(NOT CKPT_CLI OR NOT CKPT_DOCS_DIR)
  message(FATAL_ERROR "docs.cmake needs CKPT_CLI and CKPT_DOCS_DIR")
endif()
file(MAKE_DIRECTORY ${CKPT_DOCS_DIR}/completion)
foreach(doc "ckpt.1;--man" "completion/ckpt;--completion;bash" "completion/_ckpt;--completion;zsh")
  list(POP_FRONT doc name)
  set(out ${CKPT_DOCS_DIR}/${name})
  execute_process(COMMAND ${CKPT_CLI} help ${doc} OUTPUT_FILE ${out}.tmp RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    file(REMOVE ${out}.tmp)
    message(FATAL_ERROR "${CKPT_CLI} help ${doc}: ${rc}")
  endif()
  file(RENAME ${out}.tmp ${out})
endforeach()
