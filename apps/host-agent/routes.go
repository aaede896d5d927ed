package main

import (
	"net/url"
	"strings"
)

// route is a parsed request path of the kubelet's streaming API.
type route struct {
	kind      string // "exec", "attach" or "portForward"
	namespace string
	pod       string
	uid       string // empty when the path has none
	container string // exec and attach only
}

// parseRoute parses an escaped URL path:
//
//	/exec/{namespace}/{pod}/{container}    /exec/{namespace}/{pod}/{uid}/{container}
//	/attach/{namespace}/{pod}/{container}  /attach/{namespace}/{pod}/{uid}/{container}
//	/portForward/{namespace}/{pod}         /portForward/{namespace}/{pod}/{uid}
func parseRoute(escapedPath string) (route, bool) {
	parts := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	for i, p := range parts {
		s, err := url.PathUnescape(p)
		if err != nil || s == "" || strings.Contains(s, "/") {
			return route{}, false
		}
		parts[i] = s
	}
	r := route{kind: parts[0]}
	args := parts[1:]
	switch r.kind {
	case "exec", "attach":
		switch len(args) {
		case 3:
			r.namespace, r.pod, r.container = args[0], args[1], args[2]
		case 4:
			r.namespace, r.pod, r.uid, r.container = args[0], args[1], args[2], args[3]
		default:
			return route{}, false
		}
	case "portForward":
		switch len(args) {
		case 2:
			r.namespace, r.pod = args[0], args[1]
		case 3:
			r.namespace, r.pod, r.uid = args[0], args[1], args[2]
		default:
			return route{}, false
		}
	default:
		return route{}, false
	}
	return r, true
}
