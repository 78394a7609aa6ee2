/*
 * verbsexp: marks a directory of the project's restatement.
 *
 * The restated headers defer to an installed MLNX_OFED's own (see
 * verbs_exp.h), but never to another copy of the restatement found later
 * on the include path: this file is how they tell the two apart.  It
 * declares nothing.
 */
