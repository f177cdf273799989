package audit

import (
	"strconv"

	"airlock/internal/jsonstr"
)

func appendIngressKinds(b []byte, e *Event) []byte {
	if p := e.Preview; p != nil {
		b = jsonstr.Append(append(b, `,"preview":{"stage":`...), p.Stage)
		b = strconv.AppendInt(append(b, `,"port":`...), int64(p.Port), 10)
		b = optString(b, `,"name":`, p.Name)
		b = optString(b, `,"principal":`, p.Principal)
		b = optString(b, `,"by":`, p.By)
		b = append(optString(b, `,"expires":`, p.Expires), '}')
	}
	if in := e.Ingress; in != nil {
		b = optString(append(b, `,"ingress":{`...), `"principal":`, in.Principal)
		if in.Principal != "" {
			b = append(b, ',')
		}
		b = jsonstr.Append(append(b, `"client":`...), in.Client)
		b = jsonstr.Append(append(b, `,"method":`...), in.Method)
		b = jsonstr.Append(append(b, `,"host":`...), in.Host)
		b = jsonstr.Append(append(b, `,"path":`...), in.Path)
		b = optString(b, `,"proto":`, in.Proto)
		b = optInt(b, `,"port":`, int64(in.Port))
		b = strconv.AppendInt(append(b, `,"status":`...), int64(in.Status), 10)
		b = strconv.AppendInt(append(b, `,"bytes_up":`...), in.BytesUp, 10)
		b = strconv.AppendInt(append(b, `,"bytes_down":`...), in.BytesDown, 10)
		b = strconv.AppendInt(append(b, `,"duration_ms":`...), in.DurationMS, 10)
		b = optString(b, `,"upgrade":`, in.Upgrade)
		b = append(optInt(b, `,"count":`, in.Count), '}')
	}
	return b
}
