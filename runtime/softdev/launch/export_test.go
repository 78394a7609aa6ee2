package launch

// DebsKey is the name of the package cache's directory for the packages
// of dir, for tests that plant a cache where a launcher would look.
func DebsKey(dir string) (string, error) {
	key, _, err := debsKey(dir)
	return key, err
}
