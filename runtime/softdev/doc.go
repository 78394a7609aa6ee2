// Package softdev is a software verbs device with cross-channel
// ("CORE-Direct") semantics, living in the calling process. See the
// package documentation in softdev.go's sibling doc sections.
package softdev
